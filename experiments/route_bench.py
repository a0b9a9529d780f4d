"""EXPERIMENT: ``mok.route`` by PyTorch ops around the top-k kernel (``method="torch"``) against one kernel that selects
and weighs (``method="fused"``, :func:`mok.triton_ref.router_topk.router_topk_weights`; the CUDA default since round
25).

Round 24's profile of the qwen slice's forward listed 16.1 us of small kernels around the router's top-k selection (the
gather 5.2, the sum 3.6, two copies 2.9 and 2.7, the softmax 1.7; the division fell below the list), by reading
``mok.route``'s: the logits' fp32 copy, the softmax, the weights' gather, their sum and division, the ids' int64 copy.
This script times the routing alone at the bench's shapes: GPU time of one ``mok.route`` call on bf16 logits (16 calls
per CUDA-graph replay, :func:`mok.bench.harness.time_graph_ms`), and checks that the two give the same ids and weights
within fp32 rounding. The layer with its router inside, the two alternating, is ``ab_layer.py --router --env-a
MOK_ROUTE=torch --env-b MOK_ROUTE=fused`` (round 25's call 1 ran an earlier form of this script that did both).

    python3 experiments/route_bench.py [--shapes kimi-k2.7/ep64 qwen3.5-397b/ep64 anchor-2]

Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "experiments"))

DEFAULT_SHAPES = ["kimi-k2.7/ep64", "glm-5.2/ep64", "qwen3.5-397b/ep64", "deepseek-v4-pro/ep64", "anchor-1",
                  "anchor-2", "anchor-5"]
METHODS = ("torch", "fused")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES)
    parser.add_argument("--iters", type=int, default=100, help="graph replays per routing measurement")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415 (the CPU tests import this file without a GPU)

    import mok  # noqa: PLC0415
    from cuda_breakdown import SHAPES  # noqa: PLC0415
    from mok.bench.harness import time_graph_ms  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    print(f"{'shape':22s} {'T x E, k':>16s} {'torch us':>9s} {'fused us':>9s} ids  max rel diff")
    for name in args.shapes:
        shape = SHAPES[name]
        t, e, k = shape.tokens, shape.num_experts, shape.top_k
        gen = torch.Generator(device="cuda").manual_seed(t + e)
        logits = torch.randn(t, e, device="cuda", generator=gen).to(torch.bfloat16)  # as a bf16 router GEMM gives
        with torch.no_grad():
            routes = {m: mok.route(logits, k, method=m, check_inputs=False) for m in METHODS}
            us = {m: time_graph_ms(lambda m=m: mok.route(logits, k, method=m, check_inputs=False), args.iters) * 1e3
                  for m in METHODS}
        same_ids = torch.equal(routes["torch"][1], routes["fused"][1])
        rel = float(((routes["fused"][0] - routes["torch"][0]).abs() / routes["torch"][0].abs()).max())
        print(f"{name:22s} {f'{t} x {e}, {k}':>16s} {us['torch']:9.1f} {us['fused']:9.1f} "
              f"{'same' if same_ids else 'DIFF'} {rel:13.1e}", flush=True)


if __name__ == "__main__":
    main()
