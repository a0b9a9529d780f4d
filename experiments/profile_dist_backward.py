"""EXPERIMENT: where the time of the distributed layer's backward goes, per backend, on real GPUs.

Round 27's two-GPU bench (``torchrun -m mok.dist_cli bench``, 2,048 tokens per GPU) had the ``cuda`` backward
(the Triton pipeline on the megakernel's saved gate/up rows) slower than the ``triton`` backend's (the same
pipeline on its own forward's saved rows): 15.2 against 14.5 ms at kimi-k2.7, 6.9 against 6.5 at qwen3.5-397b
(call 7 found the same kernels, one more pull of token rows for ``cuda``, and the weight gradients bound by their
stores: ``mok/cuda/ROUNDS.md``, "Round 27"). This script builds the
bench's own layer (:func:`mok.dist_cli.layer_inputs`, :func:`mok.dist_cli.layer_calls`), warms each backend up,
then profiles one backward per backend with ``torch.profiler`` on every rank and prints rank 0's table: the
backward's wall time, its GPU kernels by total time, and the host's share.

    torchrun --nproc-per-node 2 experiments/profile_dist_backward.py [--model kimi-k2.7] [--backends triton,cuda]

Needs CUDA GPUs (``cuda``: Hopper).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="kimi-k2.7")
    parser.add_argument("--backends", default="triton,cuda")
    parser.add_argument("--tokens-per-gpu", type=int, default=2048)
    parser.add_argument("--routing", choices=["uniform", "zipf"], default="uniform")
    parser.add_argument("--rows", type=int, default=14, help="kernel rows of the table")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415 (a CPU test imports this file)
    import torch.distributed as dist  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA GPUs (run under torchrun)")
    from mok.dist_cli import _model_specs, init_distributed, layer_calls, layer_inputs  # noqa: PLC0415

    rank, world, device = init_distributed("cuda")
    (spec,) = _model_specs(args.model)
    inputs = layer_inputs(spec, args.tokens_per_gpu, args.routing, 128, rank, world, device)
    for backend in args.backends.split(","):
        forward, backward = layer_calls(spec, inputs, backend)
        for _ in range(3):  # warm-up: kernels compiled, buffers made, peers set up
            backward(forward())
        torch.cuda.synchronize()
        dist.barrier()
        out = forward()
        torch.cuda.synchronize()
        dist.barrier()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            began = time.perf_counter()
            backward(out)
            host_ms = (time.perf_counter() - began) * 1e3
            torch.cuda.synchronize()
            wall_ms = (time.perf_counter() - began) * 1e3
        kernels = [e for e in prof.key_averages() if e.device_type == torch.autograd.DeviceType.CUDA]
        gpu_ms = sum(e.self_device_time_total for e in kernels) / 1e3
        if rank == 0:
            print(f"{spec.name} {backend} rank 0 of {world}: backward wall {wall_ms:.3f} ms (host returned after "
                  f"{host_ms:.3f} ms); GPU kernels {gpu_ms:.3f} ms", flush=True)
            for e in sorted(kernels, key=lambda e: -e.self_device_time_total)[:args.rows]:
                print(f"  {e.self_device_time_total / 1e3:9.3f} ms  {e.count:4d} x  {e.key[:90]}", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
