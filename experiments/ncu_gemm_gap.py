"""Hardware counters for the megakernel's GEMM gap: the kernel (ring and gather dispatch, and with communication and
epilogues ablated) next to ``torch._grouped_mm`` on the same rows, under Nsight Compute.

Why: in round 6, with communication removed, the megakernel still took 1.07-1.15x ``torch._grouped_mm``'s time on
anchors 3-5, and gather dispatch was 10-18% slower than ring at I = 2048 (mok/cuda/ROUNDS.md). Round 7's run of this
script found the mainloop on par and the gap in the epilogues (``experiments/results/h200_2026-11-29_round7/``). Timing differences say how
much; counters (tensor-pipe activity, L2 and DRAM throughput, L2 hit rate, warp stall reasons) say why. The
grouped GEMM's kernel name also tells which tile and cluster shape the vendor library picked.

Two modes:

    python experiments/ncu_gemm_gap.py anchor-4 --launch      # the launches to profile (inside NVTX "profile")
    python experiments/ncu_gemm_gap.py anchor-4 --report REP  # print the key counters of an ncu report

``experiments/gpu_run.sh`` stage ``ncu`` runs both (ncu with ``--clock-control none``: the device notes ask to
leave the clocks alone). The launches run once each for warm-up outside the NVTX range, then once inside.
"""

from __future__ import annotations

import argparse
import csv
import io
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

# (section metric name as ncu prints it, short label). Names follow ncu's SpeedOfLight, ComputeWorkloadAnalysis,
# MemoryWorkloadAnalysis and WarpStateStats sections (ncu 2025.x).
KEY_METRICS = (
    ("Duration", "duration"),
    ("Compute (SM) Throughput", "SM %"),
    ("Memory Throughput", "memory %"),
    ("L2 Cache Throughput", "L2 %"),
    ("DRAM Throughput", "DRAM %"),
    ("L2 Hit Rate", "L2 hit %"),
    ("L1/TEX Hit Rate", "L1 hit %"),
    ("Warp Cycles Per Issued Instruction", "cycles/issue"),
    # Raw metrics that gpu_run.sh's ncu stage adds with --metrics when this ncu knows them (HMMA: the bf16 tensor
    # pipe, wgmma included).
    ("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active", "tensor pipe %"),
    ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active", "tensor pipe (gmma) %"),
)


def launches(shape_name: str) -> None:
    """The launches ncu profiles: each runs once to warm up, then once inside the NVTX range ``profile``."""
    from cuda_breakdown import SHAPES, Problem

    from mok.config import get_shape
    from mok.cuda import backend

    shape = SHAPES.get(shape_name) or get_shape(shape_name)
    p = Problem(shape, n_sets=1)
    _, ids = p.routes[0]
    prep = p.prepare(0)
    no_comm_no_epilogue = backend.ABLATE_COMM | backend.ABLATE["epilogue"]
    order = torch.argsort(ids.reshape(-1), stable=True)
    gathered = p.xs[0][order // shape.top_k]
    offsets = torch.bincount(ids.reshape(-1), minlength=shape.num_experts).cumsum(0).to(torch.int32)
    h = torch.randn(gathered.shape[0], shape.intermediate, device="cuda").to(torch.bfloat16)
    wg, wu, wd = (w.transpose(-2, -1) for w in (p.w_gate, p.w_up, p.w_down))

    calls = {
        "megakernel ring": lambda: backend.launch(prep, variant="pipelined", dispatch="ring"),
        "megakernel gather": lambda: backend.launch(prep, variant="pipelined", dispatch="gather"),
        "megakernel mainloop only": lambda: backend.launch(prep, variant="pipelined", dispatch="ring",
                                                           ablate=no_comm_no_epilogue),
        "grouped_mm gate": lambda: torch._grouped_mm(gathered, wg, offs=offsets),
        "grouped_mm up": lambda: torch._grouped_mm(gathered, wu, offs=offsets),
        "grouped_mm down": lambda: torch._grouped_mm(h, wd, offs=offsets),
    }
    for fn in calls.values():
        fn()
    torch.cuda.synchronize()
    backend.check_error(prep)
    for name, fn in calls.items():
        print(f"profiled launch: {name}")
        with torch.cuda.nvtx.range("profile"):
            fn()
        torch.cuda.synchronize()


def _number(text: str) -> float:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return float("nan")


def summarize(report: Path) -> str:
    """One row per profiled kernel of an ``.ncu-rep`` (launch order), as a Markdown table (needs ``ncu``)."""
    raw = subprocess.run(["ncu", "--import", str(report), "--page", "details", "--csv"], check=True,
                         capture_output=True, text=True).stdout
    return summarize_csv(raw)


def summarize_csv(raw: str) -> str:
    """The table from ncu's ``--page details --csv`` text: each kernel's name, the :data:`KEY_METRICS` that any
    kernel reported (columns no kernel has are left out), and its three largest warp-stall ratios."""
    rows: dict[str, dict[str, str]] = {}
    names: dict[str, str] = {}
    stalls: dict[str, list[tuple[float, str]]] = {}
    for rec in csv.DictReader(io.StringIO(raw)):
        kid = rec.get("ID", "?")
        names[kid] = rec.get("Kernel Name", "?")
        metric, value, unit = rec.get("Metric Name", ""), rec.get("Metric Value", ""), rec.get("Metric Unit", "")
        for full, label in KEY_METRICS:
            if metric == full:
                rows.setdefault(kid, {})[label] = f"{value} {unit}".strip()
        if "stall" in metric.lower():
            stalls.setdefault(kid, []).append((_number(value), metric))
    labels = [label for _, label in KEY_METRICS if any(label in r for r in rows.values())]
    head = "| # | kernel | " + " | ".join(labels) + " | top stalls |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for kid in sorted(names, key=lambda k: int(k) if k.isdigit() else 0):
        top = sorted(stalls.get(kid, []), reverse=True)[:3]
        top_text = "; ".join(f"{m} {v:g}" for v, m in top)
        cells = " | ".join(rows.get(kid, {}).get(label, "-") for label in labels)
        lines.append(f"| {kid} | {names[kid][:90]} | {cells} | {top_text} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shape", help="a preset name, e.g. anchor-4")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--launch", action="store_true", help="run the launches (under ncu)")
    mode.add_argument("--report", type=Path, help="summarize this .ncu-rep")
    args = parser.parse_args(argv)
    if args.launch:
        launches(args.shape)
    else:
        print(summarize(args.report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
