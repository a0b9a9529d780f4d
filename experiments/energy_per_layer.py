"""EXPERIMENT (round 32): the energy of one layer forward per backend. Each backend's forward runs back to back for a
few seconds while nvidia-smi samples the SM clock and the board power every 50 ms; per run it prints the ms per
call, the mean clock and power over the same window, the energy per call (J) and the TFLOP/s per GHz of SM clock.

Why: the large layers run at the H200's 700 W limit, where the clock, and so the time, follows the energy a layer
needs. Round 31's rotation probe found a series slower after a power-hungry one, and round 32's call 8 read the
megakernel's anchor-2 forward at a median of 7.92 ms beside SonicMoE (p10 7.31 ms: its series after torch's) while
SonicMoE's own calls hardly moved (median 6.56, p10 6.52). Energy per call and work per clock tell a layer held back
by a lower clock from one that does less work per clock, which a time alone cannot.

Every run starts after ``--rest`` seconds of idle GPU, so each backend starts from the same state. Its first
``--settle`` seconds (the clock control catching up) are left out of both the time and the clock and power: the
calls are counted and timed (CUDA events) from the end of the settle on, and the samples are averaged over the same
window. The order of backends alternates between repeats (A B C, then C B A, ...), so no backend always runs first.

    python3 experiments/energy_per_layer.py anchor-2 anchor-5 --backends cuda,sonicmoe,torch [--json out.json]
        [--plot out.png]
    python3 experiments/energy_per_layer.py --replot out.json --plot out.png      # the plot again, on any machine
    python3 experiments/energy_per_layer.py --reread LOG[.gz] --runs old.json --json new.json   # see reread_rows

``sonicmoe`` runs SonicMoE's whole layer (its own router), the mok backends the bench's layer (router inside), as
in ``python -m mok.bench``. A mok backend may carry ``MOK_*`` switches after ``+``, so that two settings of one backend
are held at the power limit in one process, each run under its own switches and the others unset (as ab_layer.py
sides differ):

    python3 experiments/energy_per_layer.py anchor-3 --backends cuda,cuda+MOK_CUDA_DISPATCH=gather,sonicmoe

Needs a CUDA GPU and nvidia-smi; the arithmetic, the order, ``--replot`` and ``--reread`` run anywhere.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from ab_kernels import read_clock_log, start_clock_sampler  # noqa: E402
from ab_layer import environment, parse_env  # noqa: E402

SONIC_BACKEND = "sonicmoe"  # mok.bench.baselines.SONIC_NAME, which imports torch: this file's CPU tests do not


def parse_backend(spec: str) -> tuple[str, dict[str, str]]:
    """A ``--backends`` entry as (backend, switches): ``"cuda"`` -> ``("cuda", {})``,
    ``"cuda+MOK_CUDA_DISPATCH=gather"`` -> ``("cuda", {"MOK_CUDA_DISPATCH": "gather"})``. SonicMoE takes no switches
    (mok's do not reach it)."""
    backend, *pairs = spec.split("+")
    if not backend:
        raise ValueError(f"no backend before the switches in {spec!r}")
    if pairs and backend == SONIC_BACKEND:
        raise ValueError(f"{SONIC_BACKEND} takes no MOK_ switches: {spec!r}")
    return backend, parse_env(pairs)


def under_switches(fwd, switches: dict[str, str], names: set[str]):
    """``fwd`` run with ``switches`` set and the other ``names`` (those another entry sets) unset, each call, and
    the environment restored after it: the backends read their switches at every launch."""
    if not names:
        return fwd

    def call(i):
        with environment(switches, names):
            return fwd(i)
    return call


def window_means(samples: list[tuple[float, float, float]], start: float, stop: float) -> tuple[float, float, int]:
    """(mean SM clock MHz, mean power W, count) of the ``(unix time, MHz, W)`` samples taken in [start, stop]; NaN
    means when there are none. Means, not medians: with evenly spaced samples, mean power x time is the energy."""
    inside = [(mhz, watts) for stamp, mhz, watts in samples if start <= stamp <= stop]
    if not inside:
        return float("nan"), float("nan"), 0
    return sum(m for m, _ in inside) / len(inside), sum(w for _, w in inside) / len(inside), len(inside)


def run_row(shape: str, backend: str, ms: float, samples: list[tuple[float, float, float]], start: float,
            stop: float, flops: float) -> dict:
    """One run's record: ``ms`` per call (timed over [start, stop], unix times), the mean SM clock (MHz) and power
    (W) of the samples in that window, the energy per call (J = W x s), TFLOP/s and TFLOP/s per GHz."""
    mhz, watts, count = window_means(samples, start, stop)
    tflops = flops / (ms * 1e-3) / 1e12
    return {"shape": shape, "backend": backend, "ms": ms, "tflops": tflops, "sm_mhz": mhz, "watts": watts,
            "joules": watts * ms * 1e-3, "tflops_per_ghz": tflops / (mhz / 1e3), "samples": count,
            "window": [start, stop]}


def run_order(backends: list[str], repeats: int) -> list[tuple[int, str]]:
    """``(repeat, backend)`` in the order the runs go: the backends' order, reversed on every other repeat."""
    return [(repeat, backend) for repeat in range(repeats)
            for backend in (backends if repeat % 2 == 0 else backends[::-1])]


def busy_windows(samples: list[tuple[float, float, float]], watts_above: float = 300.0,
                 min_seconds: float = 3.5) -> list[tuple[float, float]]:
    """The stretches of a power log in which the board drew more than ``watts_above`` for more than ``min_seconds``
    (the runs, between rests), as ``(first, last)`` sample times in order. Shorter ones (warm-ups) are left out."""
    windows, start, last = [], None, None
    for stamp, _mhz, watts in samples:
        if watts > watts_above:
            start = stamp if start is None else start
            last = stamp
        elif start is not None:
            windows.append((start, last))
            start = None
    if start is not None:
        windows.append((start, last))
    return [(a, b) for a, b in windows if b - a > min_seconds]


def reread_rows(old_rows: list[dict], samples: list[tuple[float, float, float]], edge: float = 1.0,
                **busy) -> list[dict]:
    """Rows of an earlier run made again from its saved log: each run is matched, in order, to a busy stretch of
    the power reading (:func:`busy_windows`), and its clock and power are averaged over that stretch less ``edge``
    seconds at each end, because nvidia-smi's power reading trails the GPU by about a second (round 32's call 9: it
    climbs from 130 to 700 W over the first 0.7 s of a run whose clock is already throttled, and falls as slowly
    after it), so the stretch starts late and ends late. The time stays the old row's. For call 9, whose script read
    the log before nvidia-smi had written it (7 of 18 runs without samples) and timed each whole 4 s run: its time
    then includes the run's first second, which the averages leave out."""
    windows = busy_windows(samples, **busy)
    if len(windows) != len(old_rows):
        raise ValueError(f"{len(windows)} busy stretches in the log for {len(old_rows)} runs: adjust watts_above or "
                         "min_seconds")
    return [{**run_row(r["shape"], r["backend"], r["ms"], samples, start + edge, stop - edge,
                       r["tflops"] * r["ms"] * 1e9), "repeat": r.get("repeat", 0)}
            for r, (start, stop) in zip(old_rows, windows)]


def format_table(rows: list[dict]) -> str:
    lines = ["| shape | backend | repeat | ms per call | TFLOP/s | SM MHz | W | J per call | TFLOP/s per GHz | samples |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['shape']} | {r['backend']} | {r.get('repeat', 0)} | {r['ms']:.3f} | {r['tflops']:.1f} | "
                     f"{r['sm_mhz']:.0f} | {r['watts']:.0f} | {r['joules']:.2f} | {r['tflops_per_ghz']:.1f} | "
                     f"{r['samples']} |")
    return "\n".join(lines)


def draw_runs(rows: list[dict]):
    """Per shape, a column of two panels: each run's energy per call (J, log scale: the PyTorch layer's is several
    times the others') by backend, and its work per clock (TFLOP/s per GHz) against its SM clock, so a backend held
    back by a lower clock and one doing less work per clock look different. The matplotlib figure, or ``None``
    without rows."""
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
        energy.set_xticks(range(len(backends)), [b.replace("+", "\n+") for b in backends], fontsize=7)  # switches
        energy.set_yscale("log")
        energy.set_title(shape)
        energy.set_ylabel("J per forward")
        per_clock.set_xlabel("mean SM clock (MHz)")
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


def timed_run(fwd, n_sets: int, seconds: float, settle: float) -> tuple[float, float, float]:
    """``fwd(i)`` for about ``seconds``, in groups of four calls with a synchronisation after each (so the host
    never queues far past the time budget; the GPU waits only for the next group's first launch). Returns (ms per
    call of the calls after the first ``settle`` seconds, by CUDA events, and the unix start and stop of that
    window)."""
    import torch  # noqa: PLC0415 (main only: the CPU tests import this file)

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, counted, t_start = 0, 0, None
    t0 = time.time()
    while time.time() - t0 < seconds:
        if t_start is None and time.time() - t0 >= settle:
            t_start = time.time()  # the GPU is idle here: everything queued so far has finished
            start.record()
        for _ in range(4):
            fwd(calls % n_sets)
            calls += 1
            counted += t_start is not None
        torch.cuda.synchronize()
    if t_start is None:
        raise ValueError(f"a run of {seconds} s never got past its settle of {settle} s")
    stop.record()
    torch.cuda.synchronize()
    return start.elapsed_time(stop) / counted, t_start, time.time()


def measure_shape(name: str, backends: list[str], args, device) -> list[tuple]:
    """Every run of one shape: ``(shape, backend, repeat, ms per call, unix start, unix stop, FLOPs)``. The layers
    live only in this call, so their memory goes when it returns."""
    import torch  # noqa: PLC0415

    from mok.bench.baselines import SonicLayer  # noqa: PLC0415
    from mok.bench.harness import layer_flops  # noqa: PLC0415
    from mok.bench.problems import LayerProblem  # noqa: PLC0415
    from mok.config import get_shape  # noqa: PLC0415

    shape = get_shape(name)
    flops = layer_flops(shape, "fwd")
    problem = LayerProblem(shape, "bf16", device, router=True)
    specs = {spec: parse_backend(spec) for spec in backends}
    names = {name for _, switches in specs.values() for name in switches}
    calls = {}
    for backend, (base, switches) in specs.items():
        if base == SONIC_BACKEND:
            sonic = SonicLayer(shape, device)
            calls[backend] = (sonic.forward, len(sonic.xs))
        else:
            calls[backend] = (under_switches(problem.calls(base)["fwd"], switches, names), len(problem.xs))
        fwd, n_sets = calls[backend]
        for i in range(3):  # compilation, autotuning, workspaces
            fwd(i % n_sets)
    torch.cuda.synchronize()
    runs = []
    for repeat, backend in run_order(backends, args.repeats):
        fwd, n_sets = calls[backend]
        time.sleep(args.rest)
        ms, start, stop = timed_run(fwd, n_sets, args.seconds, args.settle)
        runs.append((name, backend, repeat, ms, start, stop, flops))
        print(f"{name} {backend} (repeat {repeat}): {ms:.3f} ms per call", flush=True)
    return runs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*")
    parser.add_argument("--backends", default="cuda,sonicmoe,torch")
    parser.add_argument("--seconds", type=float, default=4.0, help="length of one run")
    parser.add_argument("--rest", type=float, default=3.0, help="idle seconds before each run")
    parser.add_argument("--settle", type=float, default=1.0, help="first seconds of a run, neither timed nor averaged")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", default=None, help="also draw the runs (PNG)")
    parser.add_argument("--replot", type=Path, default=None, metavar="JSON",
                        help="only draw --plot from an earlier run's --json (no GPU needed)")
    parser.add_argument("--reread", type=Path, default=None, metavar="LOG",
                        help="only make the rows of --runs again from this saved nvidia-smi log (reread_rows)")
    parser.add_argument("--runs", type=Path, default=None, metavar="JSON", help="the earlier run's --json, for --reread")
    args = parser.parse_args(argv)
    if args.replot is not None:
        if not args.plot:
            parser.error("--replot needs --plot")
        print(plot_runs(json.loads(args.replot.read_text())["rows"], args.plot) or "nothing drawn")
        return
    if args.reread is not None:
        if args.runs is None:
            parser.error("--reread needs --runs")
        rows = reread_rows(json.loads(args.runs.read_text())["rows"], read_clock_log(args.reread))
        write_outputs(rows, {"reread": str(args.reread), "runs": str(args.runs)}, args)
        return
    if not args.shapes:
        parser.error("give at least one shape (or --replot, --reread)")
    try:
        for spec in args.backends.split(","):
            parse_backend(spec)
    except ValueError as error:
        parser.error(str(error))

    import torch  # noqa: PLC0415

    from mok.bench.harness import free_memory  # noqa: PLC0415

    device = torch.device("cuda")
    log_dir = args.json.parent if args.json else Path(tempfile.mkdtemp(prefix="energy_per_layer_"))
    log = (log_dir / ((args.json.stem if args.json else "energy_per_layer") + ".smi.csv")).resolve()
    log.parent.mkdir(parents=True, exist_ok=True)
    sampler = start_clock_sampler(log)
    runs = []
    try:
        for name in args.shapes:
            runs += measure_shape(name, args.backends.split(","), args, device)
            free_memory(device)
        time.sleep(0.5)
    finally:
        sampler.terminate()
        sampler.wait()
    # The log is read once the sampler has stopped: nvidia-smi writes it in bursts, so a read right after a run
    # can miss that run's samples (round 32's call 9 read none for 7 of its 18 runs that way).
    samples = read_clock_log(log)
    rows = [{**run_row(name, backend, ms, samples, start, stop, flops), "repeat": repeat}
            for name, backend, repeat, ms, start, stop, flops in runs]
    write_outputs(rows, {"gpu": torch.cuda.get_device_name(), "smi_log": str(log)}, args)


def write_outputs(rows: list[dict], metadata: dict, args) -> None:
    """The table printed; ``--json`` and ``--plot`` written where asked."""
    print()
    print(format_table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({**metadata, "args": {k: str(v) for k, v in vars(args).items()},
                                         "rows": rows}, indent=1))
        print(f"wrote {args.json}")
    if args.plot:
        drawn = plot_runs(rows, args.plot)
        print(f"wrote {drawn}" if drawn else "nothing drawn (no rows, or no matplotlib)")


if __name__ == "__main__":
    main()
