"""EXPERIMENT: where a training step's backward spends its time, per backend (torch.profiler).

For each backend, runs forward + backward at one shape a few times (warm-up), then profiles one more step and
prints: the backward's wall time (forward finished first), when backward() returned to the host, the GPU time of
the kernels it launched (wall minus GPU time: the GPU waiting for the host or idle), and the ten operators with
the most GPU time and with the most host time. ``--sync-debug``: every host synchronisation of one more backward,
with the mok lines that caused it; ``--python``: cProfile of one more backward. Run on the H200 from the
repository root:

    python3 experiments/profile_backward.py qwen3.5-397b/ep64 [--backends cuda,triton] [--sync-debug] [--python]
        [--router]   # the bench's layer instead (mok.bench.problems.LayerProblem): router and routing inside, the
                     # gradients of x, the router weights and the expert weights, as the bench's fwd+bwd asks them
"""
from __future__ import annotations

import argparse
import time
import traceback
import warnings

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

import mok
from mok.config import get_shape
from mok.cuda.sanitize_check import make_inputs


def forward(backend, inputs):
    x, ids, w, wg, wu, wd = inputs
    leaves = [t.detach().requires_grad_(True) for t in (x, w, wg, wu, wd)]
    out = mok.moe(leaves[0], ids, *leaves[1:], backend=backend)
    torch.cuda.synchronize()
    return out


class BenchStep:
    """``--router``: the bench's layer on input set 0; ``forward`` / ``backward`` split its ``forward_backward``."""

    def __init__(self, shape):
        from mok.bench.problems import LayerProblem

        self.problem = LayerProblem(shape, "bf16", torch.device("cuda"), n_sets=1, router=True)

    def forward(self, backend, inputs=None):
        out = self.problem.forward(backend, 0)
        torch.cuda.synchronize()
        return out


def run_backward(out, grad, step=None):
    if step is None:
        out.backward(grad)
    else:  # the bench's gradients (every leaf's, as LayerProblem.forward_backward asks them)
        step.problem.backward(out, 0)


def backward(out, grad, step=None):
    """(seconds until backward() returned to the host, seconds until the GPU finished)"""
    start = time.perf_counter()
    run_backward(out, grad, step)
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host, time.perf_counter() - start


def kernel_time_us(events) -> float:
    """GPU time of the kernels (and copies) among profiler ``events``, as the table's "Self CUDA time total" counts
    it: device events only, without the GPU-side ranges of record_function/autograd annotations (each such range
    repeats the time of the kernels inside it; summing every event counted the backward's kernels twice)."""
    return sum(e.self_device_time_total for e in events
               if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False))


def report_syncs(label: str, call) -> None:
    """Runs ``call()`` once with synchronising CUDA calls reported: each one's message and the mok frames of its
    stack (``label`` names what ran, e.g. "cuda: one backward")."""
    seen = []

    def record(message, category, filename, lineno, file=None, line=None):
        text = str(message).splitlines()[0]
        if "prototype feature" in text:  # torch's one-time notice about the debug mode itself, not a sync
            return
        frames = [f for f in traceback.extract_stack()[:-1] if "/mok/" in f.filename]
        seen.append((text, frames[-4:]))

    with warnings.catch_warnings():  # restores warnings.showwarning on the way out
        warnings.simplefilter("always")
        warnings.showwarning = record
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
    print(f"{label}: {len(seen)} synchronising CUDA call(s)")
    for message, frames in seen:
        print(f"  {message}")
        for f in frames:
            print(f"    {f.filename.split('/mok/', 1)[-1]}:{f.lineno} {f.name}: {f.line}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("shape")
    parser.add_argument("--backends", default="cuda,triton")
    parser.add_argument("--python", action="store_true", help="also cProfile one backward (host time by function)")
    parser.add_argument("--sync-debug", action="store_true",
                        help="also list the host synchronisations of one backward, with where they came from")
    parser.add_argument("--router", action="store_true",
                        help="the bench's layer (router and routing inside) and its gradients instead")
    args = parser.parse_args()
    shape = get_shape(args.shape)
    step = BenchStep(shape) if args.router else None
    run_forward = step.forward if step else forward
    inputs = None if step else make_inputs(shape.tokens, shape.hidden, shape.intermediate, shape.num_experts,
                                           shape.top_k)
    grad = None if step else torch.randn_like(inputs[0], dtype=torch.float32).to(torch.bfloat16)
    for backend in args.backends.split(","):
        for _ in range(3):
            backward(run_forward(backend, inputs), grad, step)
        unprofiled = backward(run_forward(backend, inputs), grad, step)
        out = run_forward(backend, inputs)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            backward(out, grad, step)
        events = prof.key_averages()
        gpu_us = kernel_time_us(events)
        print(f"{shape.name} {backend}: backward wall {unprofiled[1] * 1e3:.3f} ms (backward() returned to the host "
              f"after {unprofiled[0] * 1e3:.3f} ms); kernels of the profiled backward {gpu_us / 1e3:.3f} ms "
              "of GPU time")
        print(events.table(sort_by="self_device_time_total", row_limit=10, max_name_column_width=60))
        print(events.table(sort_by="self_cpu_time_total", row_limit=10, max_name_column_width=60))
        if args.sync_debug:
            out = run_forward(backend, inputs)
            report_syncs(f"{backend}: one backward", lambda: run_backward(out, grad, step))
        if args.python:
            import cProfile
            import pstats
            out = run_forward(backend, inputs)
            host = cProfile.Profile()
            host.enable()
            backward(out, grad, step)
            host.disable()
            pstats.Stats(host).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
