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
``--explain a.json b.json ...`` sets each saved report's L2 bytes of the GEMMs beside a model of them
(:func:`modelled_l2_bytes`): the bytes the GEMMs' tiles must move through L2, for the megakernel's tiles or SonicMoE's
clusters, plus the DRAM bytes that pass through L2 on their way in or out (round 42: within 8% at anchors 2, 3
and 5).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import math
import subprocess
import sys
from dataclasses import dataclass
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


# ---------------------------------------------------------------------------------------------------------------
# A model of the GEMMs' L2 bytes. A GEMM tile of tile_m x tile_n reads a tile_m x K slice of A and a tile_n x K slice
# of B through L2 (bf16), so a GEMM of M x N x K moves M K (N / tile_n) + N K (M / tile_m) elements of its operands:
# the wider the tile, the fewer re-reads of the other operand. A cluster of CTAs can multicast the operand its CTAs
# share: cluster_m CTAs along M share B (one L2 read lands in all their shared memories), cluster_n along N share A.
# Round 42 found Nsight Compute's lts__t_bytes of the GEMM kernels equal to this model plus the kernels' DRAM bytes
# (which pass through L2 on their way in or out) within 8% at anchors 2, 3 and 5, for the megakernel and SonicMoE.
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GemmTiles:
    """One GEMM's output tile, and the cluster that multicasts the operand its CTAs share."""
    tile_m: int
    tile_n: int
    cluster_m: int = 1  # CTAs along M sharing each B tile
    cluster_n: int = 1  # CTAs along N sharing each A tile


# The megakernel: 128 x 256 tiles for both GEMMs, no clusters (mok/cuda/include/mok/workspace.cuh, Sm90Tiles).
MEGAKERNEL_TILES = (GemmTiles(128, 256), GemmTiles(128, 256))
# ... in 2-CTA clusters (MOK_CUDA_CLUSTERS, round 43): pairs of gate/up row tiles share each weight tile's load (the
# model counts every gate/up tile paired; an expert's odd last tile runs alone, a few percent at the anchors).
MEGAKERNEL_CLUSTER_TILES = (GemmTiles(128, 256, cluster_m=2), GemmTiles(128, 256))
# SonicMoE's autotuned choice at the anchors (mok/cuda/ROUNDS.md, rounds 7 and 33): the gate/up GEMM 128 x 256 tiles
# in clusters of 2 along M (the weights multicast), the down GEMM 256 x 128 tiles in clusters of 2 along N (the h
# rows multicast). Its autotuner may pick others at other shapes.
SONICMOE_TILES = (GemmTiles(128, 256, cluster_m=2), GemmTiles(256, 128, cluster_n=2))


def _operand_bytes(experts: int, rows_per_expert: int, n: int, k: int, tiles: GemmTiles,
                   a_loads_per_row_tile: float | None = None) -> tuple[float, float]:
    """A's and B's bytes through L2 for ``experts`` GEMMs of rows_per_expert x n x k (bf16). ``a_loads_per_row_tile``
    overrides how often each row tile's A is read (default: once per column tile, shared by the N cluster)."""
    row_tiles = math.ceil(rows_per_expert / tiles.tile_m)
    col_tiles = math.ceil(n / tiles.tile_n)
    a_loads = col_tiles / tiles.cluster_n if a_loads_per_row_tile is None else a_loads_per_row_tile
    a = experts * row_tiles * a_loads * tiles.tile_m * k * 2
    b = experts * row_tiles * col_tiles * tiles.tile_n * k * 2 / tiles.cluster_m
    return a, b


def modelled_l2_bytes(shape, tiles: tuple[GemmTiles, GemmTiles] = MEGAKERNEL_TILES, ring_copy: bool = True,
                      down_a_span: int = 1, saved_preact: bool = False) -> dict[str, float]:
    """GB that one forward's two GEMMs move through L2 at ``shape`` (a :class:`mok.config.MoEShape`) with routing
    spread evenly over the experts: each GEMM's A and B tile loads, the h and y rows they write (each expert's rows
    padded to the gate/up tile's height, as the megakernel's schedule pads them), and, with ``ring_copy``, the
    dispatch's copy of the token rows into the ring (read and written once). ``down_a_span``: a down task's column
    blocks that share one load of its A tile (the megakernel does that where a tile's K blocks fit its stages:
    ``megakernel_down_a_span``). ``saved_preact``: the gate/up GEMM also writes its 2I outputs before the SwiGLU
    (SonicMoE keeps them for the backward). "modelled" is the sum."""
    gate_up, down = tiles
    rows_per_expert = shape.tokens * shape.top_k / shape.num_experts
    padded_rows = math.ceil(rows_per_expert / gate_up.tile_m) * gate_up.tile_m * shape.num_experts
    h, i = shape.hidden, shape.intermediate
    gate_up_a, gate_up_b = _operand_bytes(shape.num_experts, rows_per_expert, 2 * i, h, gate_up)
    down_loads = None
    if down_a_span > 1:
        down_loads = math.ceil(h / down.tile_n) / down_a_span
    down_a, down_b = _operand_bytes(shape.num_experts, rows_per_expert, h, i, down, down_loads)
    writes = padded_rows * i * 2 * (3 if saved_preact else 1) + padded_rows * h * 2
    copy = 2 * shape.tokens * shape.top_k * h * 2 if ring_copy else 0
    out = {"gate/up A": gate_up_a, "gate/up B": gate_up_b, "down A": down_a, "down B": down_b,
           "h and y writes": writes, "ring copy": copy}
    out = {name: value * 1e-9 for name, value in out.items()}
    out["modelled"] = sum(out.values())
    return out


def megakernel_down_a_span(shape, dispatch: str) -> int:
    """Column blocks per down task that load their A tile once: the down span (``resolve_down_span`` with its
    defaults) where the tile's whole K (I) fills the stage ring exactly, so each K block stays in its stage for every
    column block (sm90_moe_forward.cuh's ``a_stays``); else 1."""
    from mok.cuda.backend import DOWN_PING_PONG_MAX_INTERMEDIATE, resolve_down_span  # noqa: PLC0415 (torch)

    if shape.intermediate != DOWN_PING_PONG_MAX_INTERMEDIATE:  # kStages * kBlockK: the stage ring's K
        return 1
    return resolve_down_span("auto", dispatch, shape.hidden, shape.intermediate, down_tma=True)


def report_model(path: Path) -> dict:
    """A saved report (``--json``; named traffic_<shape>_<backend><tag>.json) beside :func:`modelled_l2_bytes`:
    the backend from the name (``sonicmoe``, or the megakernel in gather dispatch if the tag says ``gather``, else
    in the dispatch its default picks at that shape; in 2-CTA clusters if the tag says ``clusters``). Returns the
    GEMMs' measured L2 and DRAM GB, the model's parts and the ratio of measured L2 to the model plus the DRAM
    bytes."""
    from mok.config import get_shape  # noqa: PLC0415

    data = json.loads(path.read_text())
    shape = get_shape(data["shape"])
    what = path.stem.removeprefix("traffic_").removeprefix(f"{data['shape']}_")
    if what.startswith("sonicmoe"):
        model = modelled_l2_bytes(shape, SONICMOE_TILES, ring_copy=False, saved_preact=True)
    else:
        from mok.cuda.backend import resolve_dispatch  # noqa: PLC0415

        dispatch = "gather" if "gather" in what else resolve_dispatch("auto", shape.intermediate)
        tiles = MEGAKERNEL_CLUSTER_TILES if "clusters" in what else MEGAKERNEL_TILES
        model = modelled_l2_bytes(shape, tiles, ring_copy=dispatch == "ring",
                                  down_a_span=megakernel_down_a_span(shape, dispatch))
    l2 = parts(data["rows"], "L2 GB")["GEMMs"]
    dram = parts(data["rows"], "DRAM read GB")["GEMMs"] + parts(data["rows"], "DRAM write GB")["GEMMs"]
    return {"report": f"{data['shape']} {what}", "measured L2": l2, "DRAM": dram, **model,
            "measured / (modelled + DRAM)": l2 / (model["modelled"] + dram)}


def explain_table(paths: list[Path]) -> str:
    """:func:`report_model` of each saved report as a Markdown table."""
    rows = [report_model(path) for path in paths]
    labels = [name for name in rows[0] if name != "report"]
    lines = ["| report | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    for row in rows:
        lines.append(f"| {row['report']} | " + " | ".join(f"{row[name]:.2f}" for name in labels) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", nargs="*", default=["anchor-2"],
                        help="a shape preset (with --launch or --report); with --plot or --explain, the --json files")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--launch", action="store_true", help="run the forward (under ncu)")
    mode.add_argument("--report", type=Path, help="summarize this .ncu-rep")
    mode.add_argument("--print-metrics", action="store_true", help="print the metrics list for ncu --metrics")
    mode.add_argument("--plot", type=Path, help="draw the reports given as JSON files (the positionals) here")
    mode.add_argument("--explain", action="store_true",
                      help="the reports given as JSON files (the positionals) beside the model of their L2 bytes")
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
    if args.explain:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
        print(explain_table([Path(name) for name in args.shape]))
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
