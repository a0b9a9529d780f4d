"""EXPERIMENT (CPU): the Python cost of the two backward paths with every Triton kernel launch made a no-op.

``backend="cuda"`` runs the Triton pipeline's backward without its forward (``triton_layer_gradients`` on the saved
gate/up rows); ``backend="triton"`` runs it after its own forward. On the H200 the first took 4.1 ms of host time
at the qwen slice against 2.2 ms (experiments/profile_backward.py, round 8). Here, under the Triton interpreter
with launches replaced by no-ops, only the Python around the kernels is left, so a difference would show up; a
tie says the extra host time on the GPU machine is spent inside CUDA calls instead. Results are garbage (no
kernel runs). Run::

    TRITON_INTERPRET=1 python3 experiments/backward_host_python.py [--profile]
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import time

import torch
import triton.runtime.interpreter as interpreter
import triton.runtime.jit as jit

import mok
from mok.config import MoKConfig
from mok.cuda import backend as cuda_backend
from mok.cuda.schedule_tables import build_kernel_schedule


def no_launch(self, *args, **kwargs):
    return None


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", action="store_true", help="cProfile the cuda path's backward too")
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
    schedule = build_kernel_schedule(ids, experts, 1, 128, None)
    saved = torch.zeros(schedule.capacity, 2 * inter, dtype=torch.bfloat16)

    def cuda_path() -> float:
        start = time.perf_counter()
        cuda_backend.triton_layer_gradients(x, ids, weights, w_gate, w_up, w_down, grad, ep_size=1, config=config,
                                            saved_gate_up=saved, schedule=schedule)
        return time.perf_counter() - start

    def triton_path() -> float:
        leaves = [t.detach().requires_grad_(True) for t in (x, weights, w_gate, w_up, w_down)]
        out = mok.moe(leaves[0], ids, *leaves[1:], backend="triton", check_inputs=False)
        start = time.perf_counter()
        out.backward(grad)
        return time.perf_counter() - start

    for _ in range(3):
        cuda_path()
        triton_path()
    cuda_ms = sum(cuda_path() for _ in range(args.calls)) / args.calls * 1e3
    triton_ms = sum(triton_path() for _ in range(args.calls)) / args.calls * 1e3
    print(f"host time per backward without kernels: cuda path {cuda_ms:.3f} ms, triton backward {triton_ms:.3f} ms")
    if args.profile:
        prof = cProfile.Profile()
        prof.enable()
        cuda_path()
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
