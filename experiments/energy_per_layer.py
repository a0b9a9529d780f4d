"""EXPERIMENT (round 32): the energy of one layer forward per backend. Each backend's forward runs back to back for a
few seconds while nvidia-smi samples the SM clock and the board power every 50 ms; per run it prints the ms per
call, the median clock and power, the energy per call (J) and the TFLOP/s per GHz of SM clock.

Why: the large layers run at the H200's 700 W limit, where the clock, and so the time, follows the energy a layer
needs. Round 31's rotation probe found a series slower after a power-hungry one, and round 32's call 8 read the
megakernel's anchor-2 forward at a median of 7.92 ms beside SonicMoE (p10 7.31 ms: its series after torch's) while
SonicMoE's own calls hardly moved (median 6.56, p10 6.52). Energy per call says which layer costs the GPU more
for the same FLOPs, which a time alone cannot.

Every run starts after ``--rest`` seconds of idle GPU, so each backend starts from the same state, and the first
``--settle`` seconds of a run are left out of the medians (the clock control catching up). The order of backends
alternates between repeats (A B C, then C B A, ...), so no backend always runs first.

    python3 experiments/energy_per_layer.py anchor-2 anchor-5 --backends cuda,sonicmoe,torch [--json out.json]
        [--plot out.png]
    python3 experiments/energy_per_layer.py --replot out.json --plot out.png      # the plot again, on any machine

``sonicmoe`` runs SonicMoE's whole layer (its own router), the mok backends the bench's layer (router inside), as
in ``python -m mok.bench``. Needs a CUDA GPU and nvidia-smi; the arithmetic (:func:`run_row`) runs anywhere.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_kernels import clock_medians, read_clock_log, start_clock_sampler  # noqa: E402


def run_row(shape: str, backend: str, ms: float, samples: list[tuple[float, float, float]], start: float,
            stop: float, flops: float) -> dict:
    """One run's record: ``ms`` per call, the median SM clock (MHz) and power (W) of the samples in [start, stop]
    (unix times), the energy per call (J = W x s), TFLOP/s and TFLOP/s per GHz."""
    mhz, watts, inside = clock_medians(samples, start, stop)
    tflops = flops / (ms * 1e-3) / 1e12
    return {"shape": shape, "backend": backend, "ms": ms, "tflops": tflops, "sm_mhz": mhz, "watts": watts,
            "joules": watts * ms * 1e-3, "tflops_per_ghz": tflops / (mhz / 1e3), "samples": len(inside)}


def format_table(rows: list[dict]) -> str:
    lines = ["| shape | backend | ms per call | TFLOP/s | SM MHz | W | J per call | TFLOP/s per GHz | samples |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['backend']} | {r['ms']:.3f} | {r['tflops']:.1f} | {r['sm_mhz']:.0f} | "
                     f"{r['watts']:.0f} | {r['joules']:.2f} | {r['tflops_per_ghz']:.1f} | {r['samples']} |")
    return "\n".join(lines)


def draw_runs(rows: list[dict]):
    """Per shape, a column of two panels: each run's energy per call (J) by backend, and its work per clock (TFLOP/s
    per GHz) against its SM clock, so a backend slower for its clock and one slower for its work per clock look
    different. The matplotlib figure, or ``None`` without rows."""
    import matplotlib.pyplot as plt  # noqa: PLC0415 (only to draw)

    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    if not shapes:
        return None
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    fig, axes = plt.subplots(2, len(shapes), figsize=(3.8 * len(shapes), 6.4), squeeze=False)
    for col, shape in enumerate(shapes):
        mine = [r for r in rows if r["shape"] == shape]
        energy, per_clock = axes[0][col], axes[1][col]
        for b, backend in enumerate(backends):
            runs = [r for r in mine if r["backend"] == backend]
            energy.scatter([b] * len(runs), [r["joules"] for r in runs], color=f"C{b}")
            per_clock.scatter([r["sm_mhz"] for r in runs], [r["tflops_per_ghz"] for r in runs], color=f"C{b}",
                              label=backend)
        energy.set_xticks(range(len(backends)), backends)
        energy.set_title(shape)
        energy.set_ylabel("J per forward")
        per_clock.set_xlabel("median SM clock (MHz)")
        per_clock.set_ylabel("TFLOP/s per GHz")
        per_clock.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_runs(rows: list[dict], path: str) -> str | None:
    """:func:`draw_runs` saved as a PNG at ``path``; ``None`` without matplotlib or without rows."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig = draw_runs(rows)
    if fig is None:
        return None
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def timed_run(fwd, n_sets: int, seconds: float) -> tuple[float, float, float]:
    """``fwd(i)`` back to back for about ``seconds``: (ms per call by CUDA events over the whole loop, unix start,
    unix stop)."""
    import torch  # noqa: PLC0415 (main only: the CPU tests import this file)

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls = 0
    t0 = time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(4):
            fwd(calls % n_sets)
            calls += 1
        torch.cuda.synchronize()  # keeps the host from queueing far past the time budget
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / calls, t0, time.time()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*")
    parser.add_argument("--backends", default="cuda,sonicmoe,torch")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one run")
    parser.add_argument("--rest", type=float, default=3.0, help="idle seconds before each run")
    parser.add_argument("--settle", type=float, default=1.0, help="first seconds of a run left out of the medians")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", default=None, help="also draw the runs (PNG)")
    parser.add_argument("--replot", type=Path, default=None, metavar="JSON",
                        help="only draw --plot from an earlier run's --json (no GPU needed)")
    args = parser.parse_args(argv)
    if args.replot is not None:
        if not args.plot:
            parser.error("--replot needs --plot")
        print(plot_runs(json.loads(args.replot.read_text())["rows"], args.plot) or "nothing drawn")
        return
    if not args.shapes:
        parser.error("give at least one shape (or --replot)")

    import torch  # noqa: PLC0415

    from mok.bench.baselines import SONIC_NAME, SonicLayer  # noqa: PLC0415
    from mok.bench.harness import free_memory, layer_flops  # noqa: PLC0415
    from mok.bench.problems import LayerProblem  # noqa: PLC0415
    from mok.config import get_shape  # noqa: PLC0415

    device = torch.device("cuda")
    log = (args.json.with_suffix(".smi.csv") if args.json else Path("energy_per_layer.smi.csv")).resolve()
    log.parent.mkdir(parents=True, exist_ok=True)
    sampler = start_clock_sampler(log)
    runs = []  # (shape, backend, repeat, ms per call, unix start, unix stop, FLOPs)
    try:
        for name in args.shapes:
            shape = get_shape(name)
            flops = layer_flops(shape, "fwd")
            problem = LayerProblem(shape, "bf16", device, router=True)
            calls = {}
            for backend in args.backends.split(","):
                if backend == SONIC_NAME:
                    sonic = SonicLayer(shape, device)
                    calls[backend] = (sonic.forward, len(sonic.xs))
                else:
                    calls[backend] = (problem.calls(backend)["fwd"], len(problem.xs))
                fwd, n_sets = calls[backend]
                for i in range(3):  # compilation, autotuning, workspaces
                    fwd(i % n_sets)
            torch.cuda.synchronize()
            order = list(calls)
            for repeat in range(args.repeats):
                for backend in order if repeat % 2 == 0 else order[::-1]:
                    fwd, n_sets = calls[backend]
                    time.sleep(args.rest)
                    ms, t0, t1 = timed_run(fwd, n_sets, args.seconds)
                    runs.append((name, backend, repeat, ms, t0, t1, flops))
                    print(f"{name} {backend} (repeat {repeat}): {ms:.3f} ms per call", flush=True)
            del calls, problem
            free_memory(device)
        time.sleep(0.5)
    finally:
        sampler.terminate()
        sampler.wait()
    # The log is read once the sampler has stopped: nvidia-smi writes it in bursts, so a read right after a run
    # can miss that run's samples (round 32's call 9 read none for 7 of its 18 runs that way).
    samples = read_clock_log(log)
    rows = [{**run_row(name, backend, ms, samples, t0 + args.settle, t1, flops), "repeat": repeat,
             "window": [t0, t1]} for name, backend, repeat, ms, t0, t1, flops in runs]
    print()
    print(format_table(rows))
    if args.json:
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "args": vars(args) | {"json": str(args.json)},
                                         "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        print(f"wrote {plot_runs(rows, args.plot)}")


if __name__ == "__main__":
    main()
