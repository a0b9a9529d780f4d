"""EXPERIMENT: the bytes each kernel of one forward moves (DRAM and L2), mok's `cuda` layer beside SonicMoE's.

Round 32's energy runs found the megakernel's layer needing more joules per forward than SonicMoE's at anchors 2-3
(both at the 700 W limit, so the time follows the energy), and round 34's ring-mode path doing more work per clock
at a lower clock. Which traffic costs the energy was not measured. This script answers the first half: per kernel
of one bench forward (router inside, as the bench times it), Nsight Compute's DRAM bytes read and written, the L2's
bytes, the SM clock and the instructions issued, summed per backend.

Two modes, one process per backend (a CUDA context per layer keeps the reports apart):

    ncu --clock-control none --nvtx --nvtx-include "traffic/" --metrics <METRICS> -o rep \\
        python3 experiments/forward_traffic.py anchor-2 --backend cuda --launch
    python3 experiments/forward_traffic.py anchor-2 --report rep.ncu-rep [--json out.json]

``METRICS`` is :data:`METRICS` joined by commas (``--print-metrics`` prints it). ``experiments/gpu_run.sh``'s stage
``traffic`` runs both for ``$MOK_TRAFFIC_SHAPES`` and ``$MOK_TRAFFIC_BACKENDS``. ``--plot out.png a.json b.json ...``
draws the saved reports side by side, each forward split into its GEMMs, its weighted sum and the rest.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_kernels import parse_options  # noqa: E402  (KEY=VALUE options, as ab_kernels.py takes them)

# (ncu raw metric, column label, scale from the SI unit (seconds, bytes, Hz, instructions) to the label's)
METRICS: tuple[tuple[str, str, float], ...] = (
    ("gpu__time_duration.sum", "us", 1e6),
    ("dram__bytes_read.sum", "DRAM read GB", 1e-9),
    ("dram__bytes_write.sum", "DRAM write GB", 1e-9),
    ("lts__t_bytes.sum", "L2 GB", 1e-9),
    ("sm__cycles_elapsed.avg.per_second", "SM MHz", 1e-6),
    ("smsp__inst_executed.sum", "G instructions", 1e-9),
)
# ncu scales its units per value unless asked for base units; either way the units row says which it used.
_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}     # byte, hz, inst, cycle (case-insensitive)
_TIME_PREFIX = {"": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}       # second or s ("ns" in base units)
SUMMED = ("us", "DRAM read GB", "DRAM write GB", "L2 GB", "G instructions")


def launch(shape_name: str, backend: str, warmups: int, config: dict | None = None) -> None:
    """Warm the layer up (SonicMoE compiles on its first call), then run one forward inside NVTX ``traffic/``.
    ``config``: :class:`mok.MoKConfig` fields for mok's backends (the minibatch policy or size, for instance)."""
    import torch  # noqa: PLC0415

    from mok.bench.baselines import SONIC_NAME, SonicLayer  # noqa: PLC0415
    from mok.bench.problems import LayerProblem  # noqa: PLC0415
    from mok.config import MoKConfig, get_shape  # noqa: PLC0415

    shape = get_shape(shape_name)
    device = torch.device("cuda")
    if backend == SONIC_NAME:
        forward = SonicLayer(shape, device).forward
    else:
        problem = LayerProblem(shape, "bf16", device, router=True, config=MoKConfig(**(config or {})))
        forward = problem.calls(backend)["fwd"]
    for i in range(warmups):
        forward(i % 3)
    torch.cuda.synchronize()
    with torch.cuda.nvtx.range("traffic"):
        forward(0)
    torch.cuda.synchronize()
    print(f"profiled one {backend} forward at {shape_name}")


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return float("nan")


def _seconds(unit: str) -> float | None:
    """Seconds in one ``unit`` ("ns", "usecond", "second", ...), or None if it is not a time."""
    for suffix in ("second", "s"):
        if unit.endswith(suffix) and unit[: -len(suffix)] in _TIME_PREFIX:
            return _TIME_PREFIX[unit[: -len(suffix)]]
    return None


def si_factor(unit: str) -> float:
    """The factor from an ncu unit to its SI unit: "Mbyte" 1e6, "usecond" and "us" 1e-6, "cycle/nsecond" 1e9, "Ghz"
    1e9, "inst" 1. Raises ValueError on a unit it does not know (better than a table off by 1,000)."""
    u = unit.strip()
    if u == "":
        return 1.0
    if "/" in u:  # a rate: cycle/nsecond and the like
        per = _seconds(u.split("/", 1)[1])
        if per is not None:
            return 1.0 / per
    elif (seconds := _seconds(u)) is not None:
        return seconds
    low = u.lower()
    for base in ("byte", "hz", "inst", "cycle"):
        if low.endswith(base) and low[: -len(base)] in _PREFIX:
            return _PREFIX[low[: -len(base)]]
    raise ValueError(f"unknown ncu unit {unit!r}")


def kernel_rows(raw_csv: str) -> list[dict]:
    """Rows of ncu's ``--page raw --csv`` output (a header, a units row, one row per kernel) as dicts with the
    kernel's name and :data:`METRICS`' labels, in launch order. Metrics this ncu did not give are absent."""
    records = list(csv.reader(io.StringIO(raw_csv)))
    header_at = next(i for i, rec in enumerate(records) if "Kernel Name" in rec)
    header = records[header_at]
    units: dict[str, str] = {}
    rows = []
    for rec in records[header_at + 1:]:
        if len(rec) != len(header):
            continue
        cells = dict(zip(header, rec))
        if not cells.get("ID", "").strip().isdigit():  # the units row
            units = cells
            continue
        row = {"kernel": cells["Kernel Name"]}
        for metric, label, scale in METRICS:
            if metric in cells:
                row[label] = _number(cells[metric]) * si_factor(units.get(metric, "")) * scale
        rows.append(row)
    return rows


def totals(rows: list[dict]) -> dict:
    """The forward's sums over its kernels, and the time-weighted SM clock."""
    out = {label: sum(row.get(label, 0.0) for row in rows) for label in SUMMED}
    timed = [row for row in rows if "SM MHz" in row and "us" in row]
    if timed:
        out["SM MHz"] = sum(row["SM MHz"] * row["us"] for row in timed) / max(sum(r["us"] for r in timed), 1e-30)
    out["kernels"] = len(rows)
    return out


def table(title: str, rows: list[dict]) -> str:
    """A Markdown table: one line per kernel, then the forward's sums."""
    labels = [label for _, label, _ in METRICS if any(label in row for row in rows)]
    lines = [f"### {title}", "", "| kernel | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for row in rows + [dict(totals(rows), kernel=f"**all {len(rows)} kernels**")]:
        cells = " | ".join(f"{row[label]:.3f}" if label in row else "-" for label in labels)
        lines.append(f"| {row['kernel'][:70]} | {cells} |")
    return "\n".join(lines)


def kernel_part(name: str) -> str:
    """Which part of a forward a kernel is: "GEMMs" (the megakernel, or SonicMoE's two grouped GEMMs), "sum" (the
    weighted sum) or "routing" (router GEMM, top-k, schedule and everything else)."""
    if "sm90_moe_forward_kernel" in name or "quackgemm" in name:
        return "GEMMs"
    if "sum_kernel" in name:
        return "sum"
    return "routing"


def parts(rows: list[dict], label: str) -> dict[str, float]:
    """``label`` summed over the kernels of each part (:func:`kernel_part`)."""
    out = {"GEMMs": 0.0, "sum": 0.0, "routing": 0.0}
    for row in rows:
        out[kernel_part(row["kernel"])] += row.get(label, 0.0)
    return out


def figure(reports: list[Path]):
    """One panel per quantity (DRAM read, DRAM write, L2, instructions), one stacked bar per saved report (the
    ``--json`` files, named traffic_<shape>_<backend><tag>.json); returns the matplotlib figure."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    bars = []
    for path in reports:  # the label is "<shape>\n<backend><tag>"
        data = json.loads(path.read_text())
        what = path.stem.removeprefix("traffic_").removeprefix(f"{data['shape']}_")
        bars.append((f"{data['shape']}\n{what}", data["rows"]))
    quantities = ("DRAM read GB", "DRAM write GB", "L2 GB", "G instructions")
    panel_width = max(4.2, 0.7 * len(bars))
    fig, axes = plt.subplots(1, len(quantities), figsize=(panel_width * len(quantities), 4.6))
    colors = {"GEMMs": "tab:blue", "sum": "tab:orange", "routing": "tab:gray"}
    for ax, quantity in zip(axes, quantities):
        bottoms = [0.0] * len(bars)
        for part, color in colors.items():
            heights = [parts(rows, quantity)[part] for _, rows in bars]
            ax.bar(range(len(bars)), heights, bottom=bottoms, color=color, label=part)
            bottoms = [b + h for b, h in zip(bottoms, heights)]
        ax.set_xticks(range(len(bars)), [name for name, _ in bars], fontsize=7, rotation=35, ha="right")
        ax.set_title(f"{quantity} per forward", fontsize=10)
    axes[0].legend(fontsize=8)
    fig.suptitle("One forward's traffic (Nsight Compute, router inside)", fontsize=11)
    fig.tight_layout()
    return fig


def plot(reports: list[Path], out: Path) -> None:
    """:func:`figure` saved as a PNG (no display needed)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    figure(reports).savefig(out, dpi=110)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", nargs="*", default=["anchor-2"],
                        help="a shape preset (with --launch or --report); with --plot, the --json files to draw")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--launch", action="store_true", help="run the forward (under ncu)")
    mode.add_argument("--report", type=Path, help="summarize this .ncu-rep")
    mode.add_argument("--print-metrics", action="store_true", help="print the metrics list for ncu --metrics")
    mode.add_argument("--plot", type=Path, help="draw the reports given as JSON files (the positionals) here")
    parser.add_argument("--backend", default="cuda", help="cuda, triton, torch or sonicmoe (with --launch)")
    parser.add_argument("--warmups", type=int, default=3)
    parser.add_argument("--config", nargs="*", default=[], metavar="KEY=VALUE",
                        help="with --launch: MoKConfig fields for mok's backends, e.g. policy=whole")
    parser.add_argument("--json", type=Path, help="with --report: also write the rows and sums here")
    args = parser.parse_args(argv)
    if args.print_metrics:
        print(",".join(metric for metric, _, _ in METRICS))
        return 0
    if args.plot:
        plot([Path(name) for name in args.shape], args.plot)
        return 0
    if len(args.shape) != 1:
        parser.error("--launch and --report take one shape")
    shape = args.shape[0]
    if args.launch:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        launch(shape, args.backend, args.warmups, parse_options(args.config))
    else:
        command = ["ncu", "--import", str(args.report), "--page", "raw", "--csv", "--print-units", "base"]
        raw = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        rows = kernel_rows(raw)
        print(table(f"{shape}: {args.report.stem}", rows))
        if args.json:
            args.json.write_text(json.dumps({"shape": shape, "report": args.report.name, "rows": rows,
                                             "totals": totals(rows)}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
