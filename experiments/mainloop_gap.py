"""EXPERIMENT (round 13): how far is the megakernel's GEMM work from the same mainloop run bare, and how much of
the gap is the clock?

Each workload runs back to back for ``--seconds`` while nvidia-smi samples the SM clock and power (every 50 ms, only
this GPU), so each gets its steady-state clock:

* the megakernel at SHAPE as it runs (ring mode, the default), and with ``ABLATE_ALL`` (the GEMM mainloops and the
  task hand-offs alone: no dispatch copies, no epilogue math or stores, no combine; results garbage);
* ``experiments/mainloop_roofline_probe.cu`` in its ``box`` mode (the same 128 x 256 x 64 tiles, 4 stages, wgmma
  m64n256k16, TMA loads, at anchor-5's K, with no tasks around them), ``mcastB`` (2-CTA clusters, each CTA loading
  half of the shared weight tile for both), ``cpasync`` (gather mode's A copies) and ``noload`` (wgmma alone).

It prints each workload's time per call, TFLOP/s, median SM clock and power, and TFLOP/s per GHz: equal TFLOP/s per
GHz with unequal TFLOP/s means the difference is the clock (power); unequal TFLOP/s per GHz is work the mainloop
does not do alone (waits, hand-offs, padding rows, the tail of the schedule).

Run on the H200 from the repository root (the probe binary is built first):

    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \\
        -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu
    python3 experiments/mainloop_gap.py [--seconds 2] [SHAPE ...]
"""
import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

from ab_kernels import clock_summary, read_clock_log, smi_index  # noqa: E402
from cuda_breakdown import SHAPES, Problem  # noqa: E402
from mok.cuda import backend  # noqa: E402
from mok.cuda.schedule_tables import build_kernel_schedule  # noqa: E402
from mok.cuda.workspace import release_workspaces  # noqa: E402

PROBE = Path("build/mainloop_roofline_probe")
PROBE_TILES = 160  # tiles per CTA: about 12 ms per run, like anchor-5's forward


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


PROBE_MODES = [("probe box (K 7168)", "box"), ("probe mcastB (K 7168)", "mcastB"),
               ("probe cpasync (K 7168)", "cpasync"), ("probe noload (K 7168)", "noload")]


def parse_probe_row(stdout: str, mode: str) -> tuple[float, float]:
    """(ms per run, TFLOP/s) from the probe's table row of ``mode`` ("mode CTAs ms TFLOP/s TFLOP/s/SM")."""
    row = re.search(rf"^{re.escape(mode)}\s+\d+\s+([\d.]+)\s+([\d.]+)\s", stdout, re.M)
    if row is None:
        raise RuntimeError(f"no result line for {mode} in:\n{stdout}")
    return float(row.group(1)), float(row.group(2))


def run_probe(mode: str, seconds: float) -> tuple[float, float]:
    """(ms per run, TFLOP/s) of the probe's ``mode`` run for about ``seconds``."""
    runs = max(8, int(seconds * 1000 / 12))
    out = subprocess.run([str(PROBE), str(PROBE_TILES), mode, str(runs)], capture_output=True, text=True, check=True)
    return parse_probe_row(out.stdout, mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shapes", nargs="*", default=["anchor-5", "kimi-k2.7/ep64"])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--probe-only", action="store_true", help="only the probe's modes, no megakernel")
    args = parser.parse_args()
    if not PROBE.exists():
        sys.exit(f"{PROBE} is missing: build it first (see this file's docstring)")
    log = Path(tempfile.mkdtemp()) / "clocks.csv"
    sampler = subprocess.Popen(["nvidia-smi", "-i", smi_index(), "--query-gpu=timestamp,clocks.sm,power.draw",
                                "--format=csv,noheader,nounits", "-lms", "50", "-f", str(log)])
    rows = []  # (label, ms, tflops, window)
    try:
        time.sleep(0.5)
        for label, mode in PROBE_MODES:
            t0 = time.time()
            ms, tflops = run_probe(mode, args.seconds)
            rows.append((label, ms, tflops, (t0 + 0.3, time.time())))
        for name in [] if args.probe_only else args.shapes:
            shape = SHAPES[name]
            p = Problem(shape, n_sets=1)
            prep = backend.prepare(*p.args(0), schedule=build_kernel_schedule(p.routes[0][1], shape.num_experts))
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
    print(f"{'workload':<48} {'ms/call':>9} {'TFLOP/s':>8} {'MHz':>6} {'W':>5} {'TFLOP/s/GHz':>12}")
    for label, ms, tflops, (start, stop) in rows:
        inside = [(mhz, watts) for stamp, mhz, watts in samples if start <= stamp <= stop]
        # statistics.median, as clock_summary's line below: the two printed medians agree (an even count of
        # samples averages the middle two).
        mhz = statistics.median(m for m, _ in inside) if inside else float("nan")
        watts = statistics.median(w for _, w in inside) if inside else float("nan")
        print(f"{label:<48} {ms:9.3f} {tflops:8.1f} {mhz:6.0f} {watts:5.0f} {tflops / (mhz / 1000):12.1f}")
        print(f"    {clock_summary(samples, start, stop)}")


if __name__ == "__main__":
    main()
