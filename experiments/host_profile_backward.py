"""EXPERIMENT (CPU proxy, no GPU): the host time of the ``cuda`` backend's backward with every Triton launch
stubbed out, so a host-side change can be measured before a GPU call.

The ``cuda`` backward (:func:`mok.cuda.backend.triton_layer_gradients`) is the Triton pipeline's, run on the
megakernel's saved gate/up rows. At the qwen slice it is host-bound on the H200 (round 26: 2.25 ms of host time,
1.98 ms of kernels, routing given). This script runs it on CPU tensors under ``TRITON_INTERPRET=1``, with
``InterpretedFunction.run`` replaced by a counter, so what remains is the host work: Python, tile configurations,
checks, views, allocations, pointer tables. It takes the GPU's host branches where it can: the GPU tile-configuration
table, and a pointer-table cache hit, as on the GPU after the first call (``--gpu-like``, the default). It
prints the launches per call, the 10th percentile and the median of the host time per call, and with ``--ops`` the
aten operations one call dispatches; ``--profile`` adds cProfile's top functions.

    python3 experiments/host_profile_backward.py [--shape 512,256,128,8,1] [--calls 600] [--ops] [--profile]

A CPU tensor op is not a CUDA one (no launch, no caching allocator), and Triton's own launch path
(``JITFunction.run``: binding, specialisation, descriptor encoding) is not here, so these are proxies for the share
of host work, not GPU host times. Round 26 (2-vCPU machine, 512 x 256 x 128, 8 experts, top-1): p10 604-653 us per
call before plain-Python ``cdiv`` and remembered tile configurations, 431-470 after. Round 27 (no whole-range views,
no detach, TMA descriptors rebuilt from kept fields): 48 -> 25 aten ops per call, p10 342-453 us against 431-537 us
interleaved on a busy machine; on the H200 (qwen slice shape, launches real) host p10 637-701 us against 765-822.
"""
from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported

import argparse  # noqa: E402
import collections  # noqa: E402
import cProfile  # noqa: E402
import dataclasses  # noqa: E402
import io  # noqa: E402
import pstats  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="512,256,128,8,1", help="T,H,I,E,K")
    parser.add_argument("--calls", type=int, default=600)
    parser.add_argument("--exact-cpu", action="store_true",
                        help="the interpreter's own host branches instead of the GPU's (tile table, pointer tables)")
    parser.add_argument("--ops", action="store_true", help="count the aten operations of one call")
    parser.add_argument("--profile", action="store_true", help="cProfile of 200 calls, top functions")
    args = parser.parse_args(argv)

    import torch
    import triton.runtime.interpreter as interpreter
    from torch.utils._python_dispatch import TorchDispatchMode

    import mok
    from mok.bench.harness import time_fn
    from mok.config import MoKConfig
    from mok.cuda import backend
    from mok.cuda.schedule_tables import build_kernel_schedule

    torch.set_num_threads(1)
    t, h, i, e, k = (int(v) for v in args.shape.split(","))
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(t, h, generator=gen).to(torch.bfloat16)
    weights, ids = mok.route(torch.randn(t, e, generator=gen), k, check_inputs=False)
    w_gate, w_up = ((torch.randn(e, i, h, generator=gen) * 0.05).to(torch.bfloat16) for _ in range(2))
    w_down = (torch.randn(e, h, i, generator=gen) * 0.05).to(torch.bfloat16)
    grad = torch.randn(t, h, generator=gen).to(torch.bfloat16)
    config = MoKConfig()
    # As on the GPU: the megakernel's tables only (no `source` Schedule), and its saved gate/up rows.
    tables = dataclasses.replace(build_kernel_schedule(ids, e, 1, config.expert_padding, None), source=None)
    saved = torch.zeros(tables.capacity, 2 * i, dtype=torch.bfloat16)

    launches = collections.Counter()

    def count_launch(self, *unused, **unused_kw):
        launches[self.fn.__name__] += 1

    interpreter.InterpretedFunction.run = count_launch  # the kernels' bodies do not run
    if not args.exact_cpu:
        _take_gpu_host_branches()

    def call():
        return backend.triton_layer_gradients(x, ids, weights, w_gate, w_up, w_down, grad, ep_size=1, config=config,
                                              saved_gate_up=saved, schedule=tables)

    call()
    launches.clear()
    call()
    per_call = dict(launches)
    timing = time_fn(lambda _: call(), device="cpu", warmup=20, iters=args.calls)  # (host clock on the CPU)
    result = {"launches": sum(per_call.values()), "p10_us": timing.p10_ms * 1e3, "median_us": timing.median_ms * 1e3}
    print(f"T={t} H={h} I={i} E={e} K={k}: {result['launches']} launches per call ({per_call}); host time per "
          f"call p10 {result['p10_us']:.1f} us, median {result['median_us']:.1f} us")

    if args.ops:
        class CountOps(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.ops = collections.Counter()

            def __torch_dispatch__(self, func, types, call_args=(), kwargs=None):
                self.ops[func.overloadpacket.__name__] += 1
                return func(*call_args, **(kwargs or {}))

        with CountOps() as counted:
            call()
        result["aten_ops"] = sum(counted.ops.values())
        print(f"aten operations per call: {result['aten_ops']}: {dict(counted.ops.most_common())}")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(200):
            call()
        profiler.disable()
        for key in ("tottime", "cumulative"):
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(25)
            print(f"==== cProfile, 200 calls, by {key} ====\n{text.getvalue()}")
    return result


def _take_gpu_host_branches() -> None:
    """The GPU's host branches on CPU tensors: the GPU tile-configuration table (not the interpreter's), the device
    check's GPU cost (one device type per tensor), and the pointer tables of equally spaced buffers from a cache,
    as on the GPU after the first call."""
    import torch

    import mok.comm.pointer_tables as pointer_tables
    import mok.triton_ref._common as common
    import mok.triton_ref.grouped_gemm as grouped_gemm
    import mok.triton_ref.pipeline as pipeline
    import mok.triton_ref.pull_dispatch as pull_dispatch
    import mok.triton_ref.push_combine as push_combine
    import mok.triton_ref.swiglu as swiglu

    def check_device(*tensors):  # the GPU's passing path: one device type per tensor
        for tensor in tensors:
            if tensor.device.type not in ("cuda", "cpu"):
                raise RuntimeError(f"unexpected device {tensor.device}")

    for module in (common, pull_dispatch, push_combine, swiglu):
        module.INTERPRETING = False
    for module in (common, pull_dispatch, push_combine, swiglu, grouped_gemm, pipeline):
        if hasattr(module, "check_device"):
            module.check_device = check_device
    common._CONFIGS.clear()  # (lookups made before the switch)
    cache = {}

    def spaced_pointer_table(base, step, count, device):
        key = (base, step, count)
        if key not in cache:
            cache[key] = pointer_tables._addresses(base, step, count, torch.device(device))
        return cache[key]

    pointer_tables.spaced_pointer_table = spaced_pointer_table


if __name__ == "__main__":
    main()
