"""EXPERIMENT (CPU): the host work of the two backward paths with every Triton kernel launch made a no-op.

``backend="cuda"`` runs the Triton pipeline's backward without its forward (``triton_layer_gradients`` on the saved
gate/up rows); ``backend="triton"`` runs it after its own forward. On the H200 the first is host-bound on small
layers (round 10, qwen3.5-397b/ep64: backward() returned after 2.55 ms of host time for 2.02 ms of kernels;
experiments/profile_backward.py). Here, under the Triton interpreter with launches replaced by no-ops, only the
host work around the kernels is left. Results are garbage (no kernel runs). Two paths:

* ``cuda``: ``triton_layer_gradients`` as ``CudaMoE.backward`` calls it, given the forward's ``KernelSchedule``
  without a ``source`` (as on the GPU: the megakernel's four tables only, which the pipeline reads as they are);
* ``triton``: the Triton backend's ``out.backward`` after its forward.

``--count-ops`` counts, for one backward of each path, the aten operators dispatched (a TorchDispatchMode:
allocations, views, kernels), the Triton launches, and with ``--where`` the mok line that dispatched each. On a
GPU each aten operator costs the host a few microseconds (more when it launches a kernel), which is why the
counts, not the CPU times, are the measure here. ``MOK_TRITON_REUSE_BUFFERS=1`` turns the per-pass buffer reuse
on (off by default; mok/triton_ref/pipeline.py). Run::

    TRITON_INTERPRET=1 PYTHONPATH=. python3 experiments/backward_host_python.py [--count-ops [--where]] [--profile]
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import dataclasses
import pstats
import time
import traceback

import torch
import triton.runtime.interpreter as interpreter
import triton.runtime.jit as jit
from torch.utils._python_dispatch import TorchDispatchMode

import mok
from mok.config import MoKConfig
from mok.cuda import backend as cuda_backend
from mok.cuda.schedule_tables import build_kernel_schedule

LAUNCHES: collections.Counter = collections.Counter()


def no_launch(self, *args, **kwargs):
    LAUNCHES[getattr(getattr(self, "fn", self), "__name__", "?")] += 1


class CountOps(TorchDispatchMode):
    """Counts every aten operator dispatched inside it, by name and by the mok line that dispatched it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.where: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.ops[name] += 1
        frames = [f for f in traceback.extract_stack()[:-1] if "/mok/" in f.filename]
        if frames:
            f = frames[-1]
            self.where[f"{f.filename.split('/mok/', 1)[-1]}:{f.lineno} {f.name}: {name}"] += 1
        return func(*args, **(kwargs or {}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true", help="cProfile the cuda path's backward too")
    parser.add_argument("--count-ops", action="store_true", help="count aten operators and Triton launches")
    parser.add_argument("--where", action="store_true", help="with --count-ops: the mok line of each operator")
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    jit.JITFunction.run = no_launch
    interpreter.InterpretedFunction.run = no_launch

    tokens, hidden, inter, experts, top_k = 2048, 256, 128, 8, 1
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    weights, ids = mok.route(torch.randn(tokens, experts, generator=gen), top_k, check_inputs=False)
    w_gate = (torch.randn(experts, inter, hidden, generator=gen) * 0.05).to(torch.bfloat16)
    w_up = (torch.randn(experts, inter, hidden, generator=gen) * 0.05).to(torch.bfloat16)
    w_down = (torch.randn(experts, hidden, inter, generator=gen) * 0.05).to(torch.bfloat16)
    grad = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    config = MoKConfig()
    # As on the GPU: the megakernel's tables only (on a CPU build_kernel_schedule keeps the whole Schedule).
    tables = dataclasses.replace(build_kernel_schedule(ids, experts, 1, 128, None), source=None)
    saved = torch.zeros(tables.capacity, 2 * inter, dtype=torch.bfloat16)

    # Each path: the set-up that is not part of its backward (the triton backend's forward), then a zero-argument
    # callable that runs one backward.
    def cuda_path():
        return lambda: cuda_backend.triton_layer_gradients(x, ids, weights, w_gate, w_up, w_down, grad, ep_size=1,
                                                           config=config, saved_gate_up=saved, schedule=tables)

    def triton_path():
        leaves = [t.detach().requires_grad_(True) for t in (x, weights, w_gate, w_up, w_down)]
        out = mok.moe(leaves[0], ids, *leaves[1:], backend="triton", check_inputs=False)
        return lambda: out.backward(grad)

    def timed(path) -> float:
        run = path()
        start = time.perf_counter()
        run()
        return time.perf_counter() - start

    paths = {"cuda": cuda_path, "triton": triton_path}
    for path in paths.values():
        for _ in range(3):
            timed(path)
    times = {name: sum(timed(path) for _ in range(args.calls)) / args.calls * 1e3 for name, path in paths.items()}
    print("host time per backward without kernels (CPU): "
          + ", ".join(f"{name} {ms:.3f} ms" for name, ms in times.items()))

    if args.count_ops:
        for name, path in paths.items():
            run = path()
            LAUNCHES.clear()
            with CountOps() as counted:
                run()
            print(f"{name}: {sum(counted.ops.values())} aten ops, {sum(LAUNCHES.values())} Triton launches; "
                  f"{dict(counted.ops.most_common())}")
            if args.where:
                for line, n in sorted(counted.where.items()):
                    print(f"  {n:3d} {line}")
    if args.profile:
        prof = cProfile.Profile()
        run = cuda_path()
        prof.enable()
        run()
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
