"""Pull by row against pull by token: the two orders of mok.triton_ref.pull_dispatch, side by side.

A pull fills an expert-side rank's table rows with the token rows they name (the forward's dispatch of x, the
backward's dO and router weights, and the `cuda` backend's second pull of x). By row, a token with top-k > 1 is read
once per row it has on the rank, and its rows lie in different expert segments, far apart, so the rereads come
from HBM. By token, each token row is read once and stored into all of its rows. Both write the same bits to the
same rows (checked here on every shape before timing).

For each shape (EP 1 and one window, as the pipeline's default pass; ``--ep R`` emulates R expert-side ranks,
each pulling its own table), both orders of both pulls are timed in rotation (CUDA events, the median of each
round, the median over rounds). Reported: milliseconds, the rows' bytes written per second, and the bytes each
order must read (rows x width by row, distinct tokens x width by token).

    python3 experiments/pull_order_bench.py --shapes anchor-2,anchor-5 --json out.json --md out.md
    python3 experiments/pull_order_bench.py            # CPU: a tiny shape under the interpreter (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

if not os.environ.get("TRITON_INTERPRET") and not __import__("torch").cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # before mok.triton_ref is imported

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import mok  # noqa: E402
from mok.bench.harness import collect_metadata, gbps, time_fn  # noqa: E402
from mok.config import get_shape  # noqa: E402
from mok.schedule import build_schedule  # noqa: E402
from mok.triton_ref import pull_dispatch  # noqa: E402
from mok.triton_ref.pipeline import EmulatedRankGroup  # noqa: E402
from mok.validate import bitwise_equal  # noqa: E402

TILE = 128
ORDERS = ("row", "token")
PULLS = ("x", "dO+w")


class PullProblem:
    """One shape's routing, schedule, source buffers and expert-side rows, for ``ep`` emulated ranks."""

    def __init__(self, shape, ep: int, device: torch.device, seed: int = 0) -> None:
        t, h, e, k = shape.tokens, shape.hidden, shape.num_experts, shape.top_k
        gen = torch.Generator(device=device).manual_seed(seed)
        self.shape, self.ep = shape, ep
        weights, ids = mok.route(torch.randn(t, e, generator=gen, device=device), k)
        x = torch.randn(t, h, generator=gen, device=device).to(torch.bfloat16)
        grad = torch.randn(t, h, generator=gen, device=device).to(torch.bfloat16)
        sched = build_schedule(ids, e, ep, TILE)
        self.tables = [sched.rank(r) for r in range(ep)]
        self.used = [table.rows_used() for table in self.tables]  # one host synchronisation, at set-up
        peers = EmulatedRankGroup(ep, device)
        self.x_buf = peers.wrap("x", x)
        self.grad_buf = peers.wrap("grad", grad)
        self.weight_buf = peers.wrap("w", weights.float().reshape(-1).contiguous())
        self.rows = [torch.empty(table.capacity, h, dtype=torch.bfloat16, device=device) for table in self.tables]
        self.weight_rows = [torch.empty(table.capacity, dtype=torch.float32, device=device) for table in self.tables]
        # distinct (source token, expert-side rank) pairs: what the by-token order reads
        here = torch.zeros(ep, t, dtype=torch.bool, device=device)
        for r, table in enumerate(self.tables):
            real = table.src_rank >= 0
            tokens = table.src_rank[real].long() * (t // ep) + table.src_slot[real].long() // k
            here[r, tokens] = True
        self.token_reads = int(here.sum())
        self.real_rows = sum(int((table.src_rank >= 0).sum()) for table in self.tables)

    def run(self, pull: str) -> None:
        for r, table in enumerate(self.tables):
            if pull == "x":
                pull_dispatch.pull_token_rows(table, 0, table.capacity, self.x_buf, self.rows[r])
            else:
                pull_dispatch.pull_reverse_combine(table, 0, table.capacity, self.grad_buf, self.weight_buf,
                                                   self.rows[r], self.weight_rows[r])

    def outputs(self) -> list[torch.Tensor]:
        return [rows[:used].clone() for rows, used in zip(self.rows, self.used)] + \
               [w[:used].clone() for w, used in zip(self.weight_rows, self.used)]


def in_order(order: str, fn):
    """``fn()`` with ``MOK_PULL_ORDER=order`` (pull_dispatch.pull_order reads it at every call)."""
    previous = os.environ.get("MOK_PULL_ORDER")
    os.environ["MOK_PULL_ORDER"] = order
    try:
        return fn()
    finally:
        if previous is None:
            os.environ.pop("MOK_PULL_ORDER", None)
        else:
            os.environ["MOK_PULL_ORDER"] = previous


def check_same_bits(problem: PullProblem) -> None:
    """Both orders write the same bits (rows poisoned with NaN first)."""
    for pull in PULLS:
        got = {}
        for order in ORDERS:
            for rows, w in zip(problem.rows, problem.weight_rows):
                rows.fill_(float("nan"))
                w.fill_(float("nan"))
            in_order(order, lambda: problem.run(pull))
            got[order] = problem.outputs()
        n = problem.ep if pull == "x" else 2 * problem.ep  # x: the rows only; dO+w: rows and weights
        for a, b in zip(got["row"][:n], got["token"][:n]):
            if not bitwise_equal(a, b):
                raise AssertionError(f"{problem.shape.name}: pull {pull}: the orders disagree")


def measure(problem: PullProblem, device, rounds: int, iters: int) -> list[dict]:
    h, k = problem.shape.hidden, problem.shape.top_k
    written = problem.real_rows * h * 2
    reads = {"row": problem.real_rows * h * 2, "token": problem.token_reads * h * 2}
    results = []
    for pull in PULLS:
        per_round = {order: [] for order in ORDERS}
        for _ in range(rounds):
            for order in ORDERS:
                t = in_order(order, lambda: time_fn(lambda _: problem.run(pull), device=device, warmup=3,
                                                    iters=iters))
                per_round[order].append(t.median_ms)
        ms = {order: statistics.median(v) for order, v in per_round.items()}
        for order in ORDERS:
            results.append({"shape": problem.shape.name, "top_k": k, "ep": problem.ep, "pull": pull,
                            "order": order, "ms": ms[order], "rounds_ms": per_round[order],
                            "written_gb": written / 1e9, "read_gb": reads[order] / 1e9,
                            "write_gbps": gbps(written, ms[order]),
                            "moved_gbps": gbps(written + reads[order], ms[order]),
                            "speedup_vs_row": ms["row"] / ms[order]})
    return results


# Tilings of the by-token kernel (tokens, columns, warps) that --sweep times, the default first.
SWEEP = [(4, 4096, 8), (16, 1024, 4), (8, 1024, 4), (4, 1024, 4), (2, 1024, 4), (4, 2048, 4), (2, 4096, 8),
         (1, 4096, 4), (8, 4096, 8)]


def sweep_tilings(problem: PullProblem, device, iters: int) -> list[dict]:
    """The x pull by token at each tiling of SWEEP (bitwise checked against the by-row pull first)."""
    default = dict(pull_dispatch.TOKEN_PULL_TILING)
    written = problem.real_rows * problem.shape.hidden * 2
    in_order("row", lambda: problem.run("x"))
    want = problem.outputs()[:problem.ep]
    rows = []
    try:
        for tokens, cols, warps in SWEEP:
            pull_dispatch.TOKEN_PULL_TILING.update(block_tokens=tokens, block_cols=cols, num_warps=warps)
            for r in problem.rows:
                r.fill_(float("nan"))
            in_order("token", lambda: problem.run("x"))
            same = all(bitwise_equal(a, b) for a, b in zip(problem.outputs()[:problem.ep], want))
            ms = in_order("token", lambda: time_fn(lambda _: problem.run("x"), device=device, warmup=3,
                                                   iters=iters)).median_ms
            rows.append({"shape": problem.shape.name, "ep": problem.ep, "block_tokens": tokens, "block_cols": cols,
                         "num_warps": warps, "ms": ms, "write_gbps": gbps(written, ms), "bitwise_equal": same})
    finally:
        pull_dispatch.TOKEN_PULL_TILING.update(default)
    return rows


def sweep_markdown(rows: list[dict]) -> str:
    lines = ["", "## By-token tilings (x pull)", "", "| shape | EP | tokens | columns | warps | ms | write GB/s | "
             "same bits |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['ep']} | {r['block_tokens']} | {r['block_cols']} | {r['num_warps']} | "
                     f"{r['ms']:.3f} | {r['write_gbps']:.0f} | {r['bitwise_equal']} |")
    return "\n".join(lines) + "\n"


def plot(doc: dict, path: Path | None = None):
    """Both orders side by side per shape and EP (the x pull): time, and the bytes each must read. Returns the
    figure; saved to ``path`` if given."""
    import matplotlib
    if path is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in doc["results"] if r["pull"] == "x"]
    cases = list(dict.fromkeys((r["shape"], r["ep"]) for r in rows))
    labels = [f"{shape}\nEP {ep}" for shape, ep in cases]
    fig, (ax_ms, ax_gb) = plt.subplots(1, 2, figsize=(11, 3.8))
    for offset, order in ((-0.2, "row"), (0.2, "token")):
        picked = [next(r for r in rows if (r["shape"], r["ep"], r["order"]) == (*case, order)) for case in cases]
        xs = [i + offset for i in range(len(cases))]
        ax_ms.bar(xs, [r["ms"] for r in picked], width=0.4, label=f"by {order}")
        ax_gb.bar(xs, [r["read_gb"] for r in picked], width=0.4, label=f"by {order}")
        if order == "token":
            for x, r in zip(xs, picked):
                ax_ms.annotate(f"{r['speedup_vs_row']:.2f}x", (x, r["ms"]), ha="center", va="bottom", fontsize=8)
    for ax, title in ((ax_ms, "one pull of x (ms)"), (ax_gb, "source rows requested (GB; by row, rereads can hit L2)")):
        ax.set_xticks(range(len(cases)), labels, fontsize=8)
        ax.set_title(title)
        ax.legend()
    meta = doc.get("meta", {})
    fig.suptitle(f"Pull by row vs by token: {meta.get('gpu') or meta.get('device_type')}, "
                 f"commit {meta.get('git_commit')}, {str(meta.get('date', ''))[:10]}")
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=100)
    return fig


def markdown(meta: dict, results: list[dict]) -> str:
    lines = ["# Pull by row vs pull by token", "",
             f"- date: {meta.get('date')}; device: {meta.get('gpu') or meta.get('device_type')}; "
             f"commit: {meta.get('git_commit')}",
             "- one pull of every table row in use (EP ranks emulated, each pulls its own table); median of the "
             "round medians; the two orders bitwise equal (checked first)", "",
             "| shape | top-k | EP | pull | order | ms | GB written | GB read | write GB/s | moved GB/s | x row |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['shape']} | {r['top_k']} | {r['ep']} | {r['pull']} | {r['order']} | {r['ms']:.3f} | "
                     f"{r['written_gb']:.2f} | {r['read_gb']:.2f} | {r['write_gbps']:.0f} | "
                     f"{r['moved_gbps']:.0f} | {r['speedup_vs_row']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="anchor-1,anchor-2,anchor-3,anchor-5" if cuda else "tiny-wide")
    parser.add_argument("--ep", type=int, default=1, help="emulated expert-parallel ranks")
    parser.add_argument("--rounds", type=int, default=3 if cuda else 1)
    parser.add_argument("--iters", type=int, default=20 if cuda else 2)
    parser.add_argument("--sweep", action="store_true", help="also time the by-token kernel's tilings (SWEEP)")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path, help="a PNG of both orders per shape")
    parser.add_argument("--md", type=Path)
    args = parser.parse_args(argv)
    device = torch.device("cuda" if cuda else "cpu")
    results, sweep = [], []
    for name in args.shapes.split(","):
        problem = PullProblem(get_shape(name.strip()), args.ep, device)
        check_same_bits(problem)
        results += measure(problem, device, args.rounds, args.iters)
        if args.sweep:
            sweep += sweep_tilings(problem, device, args.iters)
        del problem
        if cuda:
            torch.cuda.empty_cache()
    meta = collect_metadata(device)
    text = markdown(meta, results) + (sweep_markdown(sweep) if sweep else "")
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results, "sweep": sweep}, indent=1))
    if args.md:
        args.md.write_text(text)
    if args.plot:
        plot({"meta": meta, "results": results}, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
