"""EXPERIMENT (round 13): how far is the megakernel's GEMM work from the same mainloop run bare, and how much of
the gap is the clock?

Each workload runs back to back for ``--seconds`` while nvidia-smi samples the SM clock and power (every 50 ms, only
this GPU), so each gets its steady-state clock:

* the megakernel at SHAPE as it runs (ring mode, the default), and with ``ABLATE_ALL`` (the GEMM mainloops and the
  task hand-offs alone: no dispatch copies, no epilogue math or stores, no combine; results garbage);
* ``experiments/mainloop_roofline_probe.cu`` in its ``box`` mode (the same 128 x 256 x 64 tiles, 4 stages, wgmma
  m64n256k16, TMA loads, at anchor-5's K, with no tasks around them), ``mcastB`` (2-CTA clusters, each CTA loading
  half of the shared weight tile for both), ``cpasync`` (gather mode's A copies) and ``noload`` (wgmma alone); or
  the modes ``--modes`` names, in its order, at ``--k`` (round 42: ``box mcastB box@mcastB-grid`` twice each, each
  held for seconds, since short interleaved runs do not reach each mode's own clock at the power limit).

It prints each workload's time per call, TFLOP/s, median SM clock and power, and TFLOP/s per GHz: equal TFLOP/s per
GHz with unequal TFLOP/s means the difference is the clock (power); unequal TFLOP/s per GHz is work the mainloop
does not do alone (waits, hand-offs, padding rows, the tail of the schedule). It also writes the table as
``mainloop_gap_<stamp>.{json,md,png}`` (the PNG: TFLOP/s against the SM clock, with lines of equal TFLOP/s per GHz)
into ``experiments/results/`` (and ``$OUT/results``). ``--from-log LOG --commit C --date D`` does that for the table
of an earlier run's printed output, on any machine.

Run on the H200 from the repository root (the probe binary is built first):

    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \\
        -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu
    python3 experiments/mainloop_gap.py [--seconds 2] [SHAPE ...]
    python3 experiments/mainloop_gap.py --from-log LOG --gpu G --commit C --date D --name NAME   # any machine
"""
import argparse
import math
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

from ab_kernels import clock_medians, clock_summary, read_clock_log, start_clock_sampler  # noqa: E402
from cuda_breakdown import SHAPES, Problem  # noqa: E402
from mok.cuda import backend  # noqa: E402
from mok.cuda.workspace import release_workspaces  # noqa: E402

PROBE = Path("build/mainloop_roofline_probe")
PROBE_TILES = 160  # tiles per CTA: about 12 ms per run, like anchor-5's forward


TABLE_HEADER = f"{'workload':<48} {'ms/call':>9} {'TFLOP/s':>8} {'MHz':>6} {'W':>5} {'TFLOP/s/GHz':>12}"
_ROW = re.compile(r"^(?P<workload>\S.*?)\s+(?P<ms>[\d.]+)\s+(?P<tflops>[\d.]+)\s+(?P<mhz>[\d.]+|nan)\s+"
                  r"(?P<watts>[\d.]+|nan)\s+(?P<per_ghz>[\d.]+|nan)$")


def table_row(workload: str, ms: float, tflops: float, mhz: float, watts: float) -> dict:
    return {"workload": workload, "ms": ms, "tflops": tflops, "sm_clock_mhz": mhz, "power_w": watts,
            "tflops_per_ghz": tflops / (mhz / 1000)}


def format_row(row: dict) -> str:
    return (f"{row['workload']:<48} {row['ms']:9.3f} {row['tflops']:8.1f} {row['sm_clock_mhz']:6.0f} "
            f"{row['power_w']:5.0f} {row['tflops_per_ghz']:12.1f}")


def parse_gap_table(text: str) -> list[dict]:
    """The rows of a printed table (``TABLE_HEADER`` and the rows below it, as this script prints them)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("workload") and "TFLOP/s/GHz" in line]
    if not starts:
        raise ValueError("no mainloop_gap table in this text")
    rows = []
    for line in lines[starts[-1] + 1:]:
        match = _ROW.match(line.rstrip())
        if match:
            rows.append(table_row(match["workload"], float(match["ms"]), float(match["tflops"]), float(match["mhz"]),
                                  float(match["watts"])))
    return rows


def plot_gap(rows: list[dict], title: str):
    """TFLOP/s against the SM clock, one point per workload, with lines of equal TFLOP/s per GHz through 0: points
    on one line differ only by their clock."""
    import matplotlib.pyplot as plt  # the caller's backend (a script on a headless machine gets Agg)
    fig, ax = plt.subplots(figsize=(8, 5.5))
    # A workload without clock samples has a NaN clock (main's table): it has no point here, and NaN axis limits
    # would raise before the results are written.
    rows = [r for r in rows if math.isfinite(r["sm_clock_mhz"])]
    if not rows:
        ax.set_title(f"{title}: no clock samples")
        return fig
    top = max(r["sm_clock_mhz"] for r in rows) * 1.08
    for per_ghz in sorted({round(r["tflops_per_ghz"], -1) for r in rows}):
        ax.plot([0, top], [0, per_ghz * top / 1000], color="0.85", linewidth=0.8, zorder=0)
    for r in rows:
        probe = r["workload"].startswith("probe")
        ax.scatter(r["sm_clock_mhz"], r["tflops"], marker="s" if probe else "o",
                   color="tab:gray" if probe else "tab:blue")
        ax.annotate(f"{r['workload']} ({r['power_w']:.0f} W)", (r["sm_clock_mhz"], r["tflops"]), fontsize=7,
                    xytext=(4, 2), textcoords="offset points")
    ax.set_xlim(min(r["sm_clock_mhz"] for r in rows) * 0.92, top)
    ax.set_ylim(0, max(r["tflops"] for r in rows) * 1.1)
    ax.set_xlabel("SM clock, median while it ran (MHz)")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{title}: squares the bare mainloop, circles the megakernel; grey lines: equal TFLOP/s per GHz")
    fig.tight_layout()
    return fig


def write_results(rows: list[dict], metadata: dict, name: str) -> None:
    """``<name>.{json,md,png}`` in every results folder."""
    from mok.bench import harness
    doc = {"metadata": metadata, "rows": rows}
    table = "\n".join([f"# mainloop_gap ({metadata.get('gpu')}, {metadata.get('date')}, commit "
                       f"{metadata.get('git_commit')})", "", "```", TABLE_HEADER, *map(format_row, rows), "```", ""])
    fig = plot_gap(rows, name)
    for folder in harness.output_dirs(None):
        harness.write_json(doc, folder / f"{name}.json")
        (folder / f"{name}.md").write_text(table)
        fig.savefig(folder / f"{name}.png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)


def run_megakernel(prep, seconds: float, **kw) -> float:
    """Launch back to back for about ``seconds``; milliseconds per launch (CUDA events over the whole loop)."""
    backend.launch(prep, **kw)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.time()
    calls = 0
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(5):
            backend.launch(prep, **kw)
        calls += 5
        torch.cuda.synchronize()  # keeps the host from queueing far past the time budget
    stop.record()
    torch.cuda.synchronize()
    backend.check_error(prep)
    return start.elapsed_time(stop) / calls


PROBE_K = 7168  # anchor-5's gate/up K, the probe's default
DEFAULT_PROBE_MODES = ("box", "mcastB", "cpasync", "noload")
PROBE_MODES = [(f"probe {mode} (K {PROBE_K})", mode) for mode in DEFAULT_PROBE_MODES]


def probe_modes(modes: list[str] | None, k: int = PROBE_K) -> list[tuple[str, str]]:
    """(label, mode) of each probe workload: ``modes`` (default :data:`DEFAULT_PROBE_MODES`) in the order given (a
    mode named twice runs twice, so a drifting clock shows) at ``k``, checked against the probe's mode names."""
    names = DEFAULT_PROBE_MODES if modes is None else modes
    known = probe_mode_names()
    unknown = [name for name in names if name not in known]
    if unknown:
        raise ValueError(f"the probe has no mode {unknown[0]!r} (its modes: {', '.join(known)})")
    return [(f"probe {name} (K {k})", name) for name in names]


def probe_mode_names() -> list[str]:
    """The probe's mode names, read off its source (kNames)."""
    source = (Path(__file__).resolve().parent / "mainloop_roofline_probe.cu").read_text()
    names = re.search(r"const char\* kNames\[\] = \{(.*?)\};", source, re.S).group(1)
    return re.findall(r'"([^"]+)"', names)


def parse_probe_row(stdout: str, mode: str) -> tuple[float, float]:
    """(ms per run, TFLOP/s) from the probe's table row of ``mode`` ("mode CTAs ms TFLOP/s TFLOP/s/SM")."""
    row = re.search(rf"^{re.escape(mode)}\s+\d+\s+([\d.]+)\s+([\d.]+)\s", stdout, re.M)
    if row is None:
        raise RuntimeError(f"no result line for {mode} in:\n{stdout}")
    return float(row.group(1)), float(row.group(2))


def run_probe(mode: str, seconds: float, k: int = PROBE_K) -> tuple[float, float]:
    """(ms per run, TFLOP/s) of the probe's ``mode`` at K = ``k`` run for about ``seconds``."""
    runs = max(8, int(seconds * 1000 / (12 * k / PROBE_K)))  # a run is about 12 ms at K = 7168
    out = subprocess.run([str(PROBE), str(PROBE_TILES), mode, str(runs), str(k)], capture_output=True, text=True,
                         check=True)
    return parse_probe_row(out.stdout, mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shapes", nargs="*", default=["anchor-5", "kimi-k2.7/ep64"])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--probe-only", action="store_true", help="only the probe's modes, no megakernel")
    parser.add_argument("--modes", nargs="+", help="the probe's modes to run, in this order (default: box mcastB "
                        "cpasync noload); name one twice to see the clock drift")
    parser.add_argument("--k", type=int, default=PROBE_K, help="the probe's K (default 7168, anchor-5's gate/up)")
    parser.add_argument("--from-log", type=Path, help="write the results of the table printed in this log instead")
    parser.add_argument("--commit", help="with --from-log: the commit that ran")
    parser.add_argument("--date", help="with --from-log: when it ran (ISO date)")
    parser.add_argument("--gpu", help="with --from-log: the GPU it ran on")
    parser.add_argument("--name", help="result file name (default mainloop_gap_<stamp>)")
    args = parser.parse_args()
    if args.from_log is not None:
        rows = parse_gap_table(args.from_log.read_text())
        write_results(rows, {"gpu": args.gpu, "date": args.date, "git_commit": args.commit,
                             "source": str(args.from_log)}, args.name or f"mainloop_gap_{args.from_log.stem}")
        return
    try:
        modes = probe_modes(args.modes, args.k)
    except ValueError as error:
        parser.error(str(error))
    if not PROBE.exists():
        sys.exit(f"{PROBE} is missing: build it first (see this file's docstring)")
    log = Path(tempfile.mkdtemp()) / "clocks.csv"
    sampler = start_clock_sampler(log)
    rows = []  # (label, ms, tflops, window)
    try:
        time.sleep(0.5)
        for label, mode in modes:
            t0 = time.time()
            ms, tflops = run_probe(mode, args.seconds, args.k)
            rows.append((label, ms, tflops, (t0 + 0.3, time.time())))
        for name in [] if args.probe_only else args.shapes:
            shape = SHAPES[name]
            p = Problem(shape, n_sets=1)
            prep = p.prepare(0)
            for label, kw in [("ring", dict(dispatch="ring")),
                              ("ring, mainloops + hand-offs only", dict(dispatch="ring", ablate=backend.ABLATE_ALL))]:
                t0 = time.time()
                ms = run_megakernel(prep, args.seconds, **kw)
                rows.append((f"{name} {label}", ms, shape.forward_flops / ms / 1e9, (t0 + 0.3, time.time())))
            del prep, p
            release_workspaces()
            torch.cuda.empty_cache()
    finally:
        time.sleep(0.2)
        sampler.terminate()
        sampler.wait()
    samples = read_clock_log(log)
    print(TABLE_HEADER)
    table = []
    for label, ms, tflops, (start, stop) in rows:
        mhz, watts, _ = clock_medians(samples, start, stop)  # the medians clock_summary's line prints too
        table.append(table_row(label, ms, tflops, mhz, watts))
        print(format_row(table[-1]))
        print(f"    {clock_summary(samples, start, stop)}")
    from mok.bench import harness
    write_results(table, harness.collect_metadata(), args.name or f"mainloop_gap_{time.strftime('%Y%m%d-%H%M%S')}")


if __name__ == "__main__":
    main()
