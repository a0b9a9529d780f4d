"""EXPERIMENT: the distributed layer (one rank per GPU, ``torchrun``) under two settings of mok's ``MOK_*`` switches,
timed in rotation in one run and compared bit for bit: :mod:`ab_layer` across GPUs.

Two runs of ``mok.dist_cli bench`` cannot measure a few percent: round 29's two-GPU runs read the same ``cuda``
forward 4-15% apart (``experiments/results/multi_gpu/x2_2026-12-01_round29/README.md``). Here both sides run in the
same processes, alternating (:func:`mok.bench.harness.time_rotated`), each call with its side's environment set on
every rank::

    torchrun --nproc-per-node 2 experiments/ab_dist_layer.py --env-a MOK_PULL_ORDER=row \\
        --env-b MOK_PULL_ORDER=token --models kimi-k2.7,qwen3.5-397b --backends triton,cuda

Rank 0 prints, per model and backend, the median forward + backward time of each side (every rank times its own
calls; the layer's exchanges keep the ranks in step), their ratio, and whether this rank's output and input gradient
are the same bits on both sides. Needs CUDA GPUs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "experiments"))

from ab_layer import environment, parse_env  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-a", action="append", default=[], metavar="MOK_NAME=VALUE")
    parser.add_argument("--env-b", action="append", default=[], metavar="MOK_NAME=VALUE")
    parser.add_argument("--models", default="kimi-k2.7")
    parser.add_argument("--backends", default="triton,cuda")
    parser.add_argument("--tokens-per-gpu", type=int, default=2048)
    parser.add_argument("--routing", choices=["uniform", "zipf"], default="uniform")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3, help="calls per side and round")
    args = parser.parse_args(argv)
    sides = {"A": parse_env(args.env_a), "B": parse_env(args.env_b)}
    if sides["A"] == sides["B"]:
        parser.error("give environment switches that differ between A and B")
    names = set(sides["A"]) | set(sides["B"])

    import torch  # noqa: PLC0415 (the CPU tests import this file without a GPU)
    import torch.distributed as dist  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA GPUs (run under torchrun)")
    from mok.bench.harness import time_rotated  # noqa: PLC0415
    from mok.dist_cli import _model_specs, init_distributed, layer_calls, layer_inputs  # noqa: PLC0415

    rank, world, device = init_distributed("cuda")
    if rank == 0:
        print(f"{world} GPUs; A = {sides['A'] or 'defaults'}, B = {sides['B'] or 'defaults'}", flush=True)
    for spec in _model_specs(args.models):
        inputs = layer_inputs(spec, args.tokens_per_gpu, args.routing, 128, rank, world, device)
        for backend in args.backends.split(","):
            forward, backward = layer_calls(spec, inputs, backend)

            def side(label):
                def call(_):
                    with environment(sides[label], names):
                        out = forward()
                        return out, backward(out)[0]  # (the output and x's gradient: compared below)
                return call

            fns = {label: side(label) for label in sides}
            results = {label: fn(0) for label, fn in fns.items()}
            same = all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                       for a, b in zip(results["A"], results["B"]))
            dist.barrier()
            timings = time_rotated(fns, device=device, rounds=args.rounds, calls=args.calls)
            med = {label: t.median_ms for label, t in timings.items()}
            flops = spec.layer(args.tokens_per_gpu).forward_flops * 3  # this GPU's share, the backward twice
            if rank == 0:
                print(f"{spec.name}/{backend}: A {med['A']:.3f} ms ({flops / med['A'] / 1e9:.0f} TFLOP/s/GPU), "
                      f"B {med['B']:.3f} ms ({flops / med['B'] / 1e9:.0f}), B/A time {med['B'] / med['A']:.3f}; "
                      f"rank 0's output and dx bitwise equal: {same}", flush=True)
            del results, fns
            dist.barrier()
        del inputs
        torch.cuda.empty_cache()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
