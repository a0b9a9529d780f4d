"""Push vs pull dispatch and combine on emulated ranks: bytes, bandwidth, signalling latency.

Runs :func:`mok.bench.studies.push_pull_study` (kernels: ``mok/triton_ref/push_pull.py``) and saves
``push_pull.json`` where ``notebooks/push_vs_pull.ipynb`` reads it (``experiments/results``, and ``$OUT/results``
when set). On one GPU the ranks are emulated: the "link" is HBM/L2, not NVLink.

    python experiments/push_pull.py                      # GPU, Kimi-like sizes (8 ranks x 2,048 tokens, top-8 of 384)
    python experiments/push_pull.py --small              # CPU, Triton interpreter, tiny sizes (no performance meaning)
    python experiments/push_pull.py --ranks 4 --zipf 0,1.0,1.5 --iters 50
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="CPU, Triton interpreter, tiny sizes")
    p.add_argument("--ranks", type=int)
    p.add_argument("--tokens-per-rank", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--experts", type=int)
    p.add_argument("--top-k", type=int)
    p.add_argument("--zipf", default=None, help="comma list of Zipf exponents (0 = uniform)")
    p.add_argument("--warmup", type=int)
    p.add_argument("--iters", type=int)
    p.add_argument("--no-save", action="store_true")
    args = p.parse_args(argv)
    mode = "small" if args.small else "full"
    if mode == "small":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined

    from mok.bench import studies

    overrides = {k: v for k, v in dict(ranks=args.ranks, tokens_per_rank=args.tokens_per_rank, hidden=args.hidden,
                                       experts=args.experts, top_k=args.top_k, warmup=args.warmup,
                                       iters=args.iters).items() if v is not None}
    if args.zipf:
        overrides["routings"] = {("uniform" if float(z) == 0 else f"zipf-{float(z):g}"): float(z)
                                 for z in args.zipf.split(",")}
    doc = studies.push_pull_study(mode, **overrides)
    meta = doc["metadata"]
    print(f"push vs pull on {meta.get('gpu') or meta['device_type']}: {doc['params']['ranks']} emulated ranks; "
          f"link = {meta['link']}")
    for name, info in doc["routings"].items():
        print(f"  {name}: rows per rank {info['rows_per_expert_rank']}, max/mean {info['imbalance_max_over_mean']:.2f}, "
              f"push == pull bitwise: dispatch {info['dispatch_push_equals_pull']}, "
              f"combine {info['combine_push_equals_pull']}")
    print(f"  {'routing':>9} {'transfer':>9} {'direction':>18} {'variant':>12} {'us':>10} {'link GB/s':>10}")
    for r in doc["results"]:
        rate = f"{r['link_gbps']:10.1f}" if r["link_gbps"] else f"{'-':>10}"
        print(f"  {r['routing']:>9} {r['transfer']:>9} {r['direction']:>18} {r['variant']:>12} {r['ms'] * 1e3:10.1f} {rate}")
    if mode == "full" and not args.no_save:
        for path in studies.save_results("push_pull", doc):
            print(f"wrote {path}")
    same = all(info["dispatch_push_equals_pull"] and info["combine_push_equals_pull"] for info in doc["routings"].values())
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
