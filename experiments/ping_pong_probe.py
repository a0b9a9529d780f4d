"""EXPERIMENT (round 21): can two consumer warpgroups taking turns on the tensor cores hide an epilogue?

Round 21's ping-pong down task (each warpgroup multiplies one 128-column half of a down block over all 128 rows,
two m64n128k16 per K step, while the other runs its epilogue) took 1.9% off anchor-2, a quarter of the estimate.
This study runs ``experiments/mainloop_roofline_probe.cu`` over a grid of K and stand-in epilogues (ns per tile
in which a warpgroup issues no wgmma) and compares, at each point:

* ``noload-pingpong`` / ``noload``: one warpgroup's m64n128 pairs in turns against two warpgroups' m64n256 at once,
  no loads. Below 1 at epilogue 0 means one warpgroup alone cannot keep the tensor cores busy: no ping-pong of this
  shape can pay, whatever it hides.
* ``pingpong-shared`` / ``box`` (K <= 256): the megakernel's own form, both warpgroups reading every stage.
* ``pingpong`` / ``box``: CUTLASS's form, each half its own stages (A loaded twice per tile), the gate/up design of
  mok/cuda/README.md's "What is left".
* the ``-early`` modes against ``box`` and against their twins: the same, with the turn passed right after the turn's
  last wgmma are issued instead of once they completed (the kernel passes it after; ``pp_early_handover.patch`` of
  round 21 changes that).

Ratios are time ratios (B / A < 1: the ping-pong is faster). The epilogue is a spin on ``%globaltimer``; what it
really lasted is read back from ``noload`` ((ms at E - ms at 0) / tiles per CTA), since the timer's tick on the GPU
is not known in advance.

Run on the H200 from the repository root (the probe is built first):

    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \\
        -o build/probe experiments/mainloop_roofline_probe.cu
    python3 experiments/ping_pong_probe.py --probe build/probe [--k 256 4096] [--epilogue-ns 0 2200 4800]
    python3 experiments/ping_pong_probe.py --from-logs DIR --gpu G --commit C --date D   # any machine

It writes ``ping_pong_probe_<stamp>.{json,md,png}`` into ``experiments/results/`` (and ``$OUT/results``);
``--from-logs`` reads the probe's saved output (``probe_k<K>_e<E>.log``, as ``next_call.sh`` of round 21 writes it).
"""
from __future__ import annotations

import argparse
import re
import subprocess
import time
from pathlib import Path

TILES_PER_CTA = 16  # about 1 ms per run at K = 4096: the top clock, not the power limit
RUNS = 7
COMPARISONS = [  # (label, mode B, mode A): B / A time
    ("one warpgroup in turns, no loads", "noload-pingpong", "noload"),
    ("kernel's form (shared stages)", "pingpong-shared", "box"),
    ("kernel's form, turn after the issue", "pingpong-shared-early", "box"),
    ("CUTLASS's form (own stages)", "pingpong", "box"),
    ("CUTLASS's form, turn after the issue", "pingpong-early", "box"),
    ("hand-over after the issue, shared stages", "pingpong-shared-early", "pingpong-shared"),
    ("hand-over after the issue, own stages", "pingpong-early", "pingpong"),
]
_ROW = re.compile(r"^(?P<mode>\S+)\s+(?P<ctas>\d+)\s+(?P<ms>[\d.]+)\s+(?P<tflops>[\d.]+)\s+(?P<per_sm>[\d.]+)\s*$")
_LOG_NAME = re.compile(r"probe_k(?P<k>\d+)_e(?P<e>\d+)\.log$")


def parse_probe_table(text: str) -> dict[str, dict]:
    """{mode: {"ctas", "ms", "tflops"}} from the probe's printed table ("mode CTAs ms TFLOP/s TFLOP/s/SM")."""
    rows = {}
    for line in text.splitlines():
        match = _ROW.match(line.strip())
        if match:
            rows[match["mode"]] = {"ctas": int(match["ctas"]), "ms": float(match["ms"]),
                                   "tflops": float(match["tflops"])}
    if not rows:
        raise ValueError("no probe table in this text")
    return rows


def summarize(points: dict[tuple[int, int], dict[str, dict]], tiles_per_cta: int = TILES_PER_CTA) -> list[dict]:
    """One row per (K, epilogue ns): the epilogue that was realised (from noload against epilogue 0 at the same K)
    and each comparison's time ratio (None where a mode did not run, e.g. pingpong-shared past K = 256)."""
    rows = []
    for (k, epilogue), modes in sorted(points.items()):
        base = points.get((k, 0), {}).get("noload")
        realised = None
        if base is not None and "noload" in modes:
            realised = (modes["noload"]["ms"] - base["ms"]) * 1e6 / tiles_per_cta  # ns per tile
        row = {"k": k, "epilogue_ns": epilogue, "realised_epilogue_ns": realised,
               "tflops": {mode: r["tflops"] for mode, r in modes.items()}}
        for label, b, a in COMPARISONS:
            row[label] = modes[b]["ms"] / modes[a]["ms"] if b in modes and a in modes else None
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    width = max(len(label) for label, _, _ in COMPARISONS)
    head = f"{'K':>5} {'epilogue ns':>11} {'realised':>9} " + " ".join(f"{label:>{width}}" for label, _, _ in COMPARISONS)
    lines = [head]
    for r in rows:
        realised = "-" if r["realised_epilogue_ns"] is None else f"{r['realised_epilogue_ns']:.0f}"
        ratios = " ".join(f"{'-' if r[label] is None else format(r[label], '.3f'):>{width}}"
                          for label, _, _ in COMPARISONS)
        lines.append(f"{r['k']:>5} {r['epilogue_ns']:>11} {realised:>9} {ratios}")
    return "\n".join(lines)


def plot(rows: list[dict], title: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ks = sorted({r["k"] for r in rows})
    fig, axes = plt.subplots(1, len(ks), figsize=(5.5 * len(ks), 3.6), squeeze=False)
    for ax, k in zip(axes[0], ks):
        mine = [r for r in rows if r["k"] == k]
        width = 0.8 / len(COMPARISONS)
        for j, (label, _, _) in enumerate(COMPARISONS):
            xs = [i + (j - (len(COMPARISONS) - 1) / 2) * width for i, r in enumerate(mine) if r[label] is not None]
            ax.bar(xs, [r[label] for r in mine if r[label] is not None], width, label=label)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_xticks(range(len(mine)), [f"{r['epilogue_ns'] / 1000:g} us" for r in mine])
        ax.set_xlabel("stand-in epilogue per tile")
        ax.set_ylabel("time, ping-pong / cooperative")
        ax.set_title(f"K = {k}")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def write_results(rows: list[dict], metadata: dict, name: str) -> None:
    """``<name>.{json,md,png}`` in every results folder."""
    from mok.bench import harness
    doc = {"metadata": metadata, "tiles_per_cta": TILES_PER_CTA, "rows": rows}
    table = "\n".join([f"# ping_pong_probe ({metadata.get('gpu')}, {metadata.get('date')}, commit "
                       f"{metadata.get('git_commit')})", "", "Time ratios, B / A (< 1: the ping-pong is faster).", "",
                       "```", format_table(rows), "```", ""])
    fig = plot(rows, f"{name}: {metadata.get('gpu')}, commit {metadata.get('git_commit')}")
    for folder in harness.output_dirs(None):
        harness.write_json(doc, folder / f"{name}.json")
        (folder / f"{name}.md").write_text(table)
        fig.savefig(folder / f"{name}.png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)


def read_logs(folder: Path) -> dict[tuple[int, int], dict[str, dict]]:
    points = {}
    for path in sorted(folder.glob("probe_k*_e*.log")):
        match = _LOG_NAME.search(path.name)
        points[(int(match["k"]), int(match["e"]))] = parse_probe_table(path.read_text())
    if not points:
        raise FileNotFoundError(f"no probe_k<K>_e<E>.log in {folder}")
    return points


def run_grid(probe: Path, ks: list[int], epilogues: list[int], timeout_s: float) -> dict[tuple[int, int], dict]:
    points = {}
    for k in ks:
        for epilogue in [0, *[e for e in epilogues if e != 0]]:  # epilogue 0 calibrates the others
            out = subprocess.run([str(probe), str(TILES_PER_CTA), "all", str(RUNS), str(k), str(epilogue)],
                                 capture_output=True, text=True, timeout=timeout_s, check=True)
            points[(k, epilogue)] = parse_probe_table(out.stdout)
            print(f"K={k} epilogue={epilogue} ns: " + ", ".join(
                f"{mode} {r['tflops']:.0f}" for mode, r in points[(k, epilogue)].items()), flush=True)
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", type=Path, default=Path("build/probe"))
    parser.add_argument("--k", type=int, nargs="+", default=[256, 4096])
    parser.add_argument("--epilogue-ns", type=int, nargs="+", default=[0, 2200, 4800])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per probe run (the probe has none)")
    parser.add_argument("--from-logs", type=Path, help="read probe_k<K>_e<E>.log files instead of running")
    parser.add_argument("--gpu")
    parser.add_argument("--commit")
    parser.add_argument("--date")
    parser.add_argument("--name")
    args = parser.parse_args()
    if args.from_logs:
        points = read_logs(args.from_logs)
        metadata = {"gpu": args.gpu, "date": args.date, "git_commit": args.commit}
    else:
        from mok.bench import harness
        points = run_grid(args.probe, args.k, args.epilogue_ns, args.timeout)
        metadata = harness.collect_metadata()
    rows = summarize(points)
    print(format_table(rows))
    write_results(rows, metadata, args.name or f"ping_pong_probe_{time.strftime('%Y%m%d-%H%M%S')}")


if __name__ == "__main__":
    main()
