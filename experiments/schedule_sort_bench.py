"""EXPERIMENT: the schedule's stable sort of expert ids: torch.sort on 32-bit keys, on 16-bit keys, and the extension's
counting sort.

``mok.cuda.schedule_tables.build_kernel_schedule`` sorts every (token, k) slot by its expert id before two small kernels
build the megakernel's tables. Round 22's profile of the EP-64 slices' layer found that sort (four radix passes and
their memsets) at 24-26 us per call, 2-3% of the qwen slice's 1 ms layer; expert ids fit 16 bits, and a radix sort makes
one pass per 8 bits of key (round 22: 0.71-0.80x). Round 23 replaced it at an expert-parallel rank's slot counts by a
counting sort (``MOK_CUDA_SCHEDULE_SORT``). This script times the forms at the slots of the bench's shapes (GPU time:
each form captured in a CUDA graph, replays timed by CUDA events, the median) and checks that they give the same
permutation; the counting sort only where it applies (``-`` elsewhere).

    python3 experiments/schedule_sort_bench.py [--iters 200]
"""
from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mok.bench import harness  # noqa: E402
from mok.cuda.schedule_tables import EXPERT_SORT_MAX_EXPERTS, EXPERT_SORT_MAX_SLOTS, sort_by_expert  # noqa: E402

# (name, slots = T x K, experts): the layer bench's shapes.
CASES = [("kimi slice", 16384, 6), ("glm slice", 16384, 4), ("qwen slice", 20480, 8), ("deepseek slice", 12288, 6),
         ("anchor-1", 24576 * 8, 128), ("anchor-2", 32768 * 16, 256), ("anchor-5", 8192 * 8, 64)]


def sort_32(ids: torch.Tensor):
    return torch.sort(ids, stable=True)


def schedule_sort(method: str, experts: int):
    """The schedule's own sort (:func:`sort_by_expert`) by ``method``."""
    return functools.partial(sort_by_expert, num_experts=experts, method=method)


def time_us(fn, ids: torch.Tensor, iters: int) -> float:
    """GPU time of one call in us: 16 calls captured in one CUDA graph, replays timed back to back
    (:func:`mok.bench.harness.time_graph_ms`; a call timed alone would measure its kernel launches from the host,
    which the layer hides behind the megakernel of the call before). Round 23's call 8 and round 24's call 2 captured
    one call per graph, so their numbers also hold each replay's launch (alike for every form)."""
    return harness.time_graph_ms(lambda: fn(ids), iters) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=200)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    print(f"{'shape':16s} {'slots':>8s} {'E':>4s} {'int32 us':>9s} {'int16 us':>9s} {'counting us':>12s} same")
    for name, slots, experts in CASES:
        ids = torch.randint(0, experts, (slots,), generator=gen, device="cuda", dtype=torch.int32)
        forms = {"int32": sort_32, "int16": schedule_sort("torch", experts)}
        if slots <= EXPERT_SORT_MAX_SLOTS and experts <= EXPERT_SORT_MAX_EXPERTS:
            forms["counting"] = schedule_sort("counting", experts)
        want = sort_32(ids)
        same = all(torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
                   for got in (fn(ids) for fn in forms.values()))
        us = {form: time_us(fn, ids, args.iters) for form, fn in forms.items()}
        rows.append({"shape": name, "slots": slots, "experts": experts, **{f"{k}_us": v for k, v in us.items()},
                     "same_order": bool(same)})
        counting = f"{us['counting']:12.1f}" if "counting" in us else f"{'-':>12s}"
        print(f"{name:16s} {slots:8d} {experts:4d} {us['int32']:9.1f} {us['int16']:9.1f} {counting} {same}")
    doc = {"metadata": harness.collect_metadata(), "iters": args.iters, "rows": rows}
    for folder in harness.output_dirs(None):
        harness.write_json(doc, folder / "schedule_sort_bench.json")


if __name__ == "__main__":
    main()
