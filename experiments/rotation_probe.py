"""EXPERIMENT: does one backend in the bench's rotation change another's reading?

Every bench run with SonicMoE in its rotation had read `cuda`'s anchor-2 forward about 7% slower than the runs
without it (round 31's call 1, one machine, three runs: 7.70 / 8.23 / 7.68 ms; anchor-5 10.32 / 11.03 / 10.27, and
torch's anchor-5 16.73 / 17.92 / 16.53). This runs the bench's series (``mok.bench.harness``: CUDA events per call,
no synchronisation inside a series) in phases, in one process, and keeps every call's time with its position in its
series and the label that ran just before it:

1. ``alone``: the mok backends only;
2. ``imported``: the same, after ``import sonicmoe`` (anything global its import sets);
3. ``built``: after a SonicMoE layer of the shape was built and run (its memory and compiled kernels resident);
4. ``rotation``: SonicMoE in the rotation, as ``--interleave`` runs it;
5. ``freed``: the mok backends again after the SonicMoE layer was dropped and the cache emptied.

Between phases it records what could carry over: the SM clock and power (nvidia-smi), torch's matmul flags, the
persisting-L2 limit, the caching allocator's reserved bytes.

What it found (round 31's call 2, ``--order shifted``, the harness's order until then): nothing global. Importing
or building SonicMoE changed no flag and no reading; what changes a series is the series before it. After a
power-hungry series (`cuda` itself, SonicMoE) `cuda`'s anchor-5 calls took 10.2-11.1 ms, after torch's 9.3-10.1, and
SonicMoE's alike (after `cuda` 10.2-11.7, after torch 9.2-9.7). The shifted rotation of three labels put `cuda` after
SonicMoE in 4 of 5 rounds and SonicMoE after torch in 3 of 5; ``harness.balanced_series_order`` (now the harness's
order) puts every label after every other equally often.

    python3 experiments/rotation_probe.py anchor-2 anchor-5 [--backends torch,cuda] [--no-sonic] [--json out.json]
        [--order balanced|shifted] [--plot out.png]
    python3 experiments/rotation_probe.py --replot out.json --plot out.png      # the plot again, on any machine
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from dataclasses import asdict, dataclass

PHASES = ("alone", "imported", "built", "rotation", "freed")


@dataclass(frozen=True)
class CallTime:
    """One timed call: which phase and backend, its series' index in the phase (``round``), its position in the
    series, the backend whose series ran just before."""
    phase: str
    label: str
    round: int
    position: int
    after: str
    ms: float


def series_order(labels: list[str], rounds: int, order: str) -> list[str]:
    """The labels of the series in turn: ``"shifted"``, a fixed order rotated by one label per round (the harness's
    order until round 31), or ``"balanced"`` (:func:`mok.bench.harness.balanced_series_order`, after the last
    label, which the warm-up ran last)."""
    if order == "shifted":
        return [label for r in range(rounds) for label in labels[r % len(labels):] + labels[:r % len(labels)]]
    if order == "balanced":
        from mok.bench.harness import balanced_series_order  # noqa: PLC0415
        return balanced_series_order(labels, rounds, previous=labels[-1])
    raise ValueError(f"order must be 'shifted' or 'balanced', got {order!r}")


def summarize_calls(calls: list[CallTime]) -> dict:
    """Per (phase, label): the median of all calls, of first-in-series calls and of the rest; in phases where
    several labels rotate, also the median by the label that ran before the series."""
    out: dict = {}
    for c in calls:
        out.setdefault(c.phase, {}).setdefault(c.label, []).append(c)
    table = {}
    for phase, by_label in out.items():
        table[phase] = {}
        for label, cs in by_label.items():
            row = {"median_ms": statistics.median(c.ms for c in cs), "calls": len(cs)}
            first = [c.ms for c in cs if c.position == 0]
            rest = [c.ms for c in cs if c.position > 0]
            if first:
                row["first_in_series_ms"] = statistics.median(first)
            if rest:
                row["later_in_series_ms"] = statistics.median(rest)
            befores = sorted({c.after for c in cs if c.position == 0})
            if len(befores) > 1:
                row["first_after_ms"] = {b: statistics.median(c.ms for c in cs if c.position == 0 and c.after == b)
                                         for b in befores}
            table[phase][label] = row
    return table


def machine_state(device) -> dict:
    """What one phase could leave behind for the next: clock and power, torch flags, L2 and allocator state."""
    import torch  # noqa: PLC0415

    state = {"reserved_gib": torch.cuda.memory_reserved(device) / 2**30,
             "allocated_gib": torch.cuda.memory_allocated(device) / 2**30,
             "allow_tf32": torch.backends.cuda.matmul.allow_tf32,
             "bf16_reduced_reduction": torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
             "float32_matmul_precision": torch.get_float32_matmul_precision(),
             "current_stream": str(torch.cuda.current_stream(device))}
    try:
        from cuda.bindings import runtime  # noqa: PLC0415
        err, value = runtime.cudaDeviceGetLimit(runtime.cudaLimit.cudaLimitPersistingL2CacheSize)
        state["persisting_l2_bytes"] = int(value) if int(err) == 0 else f"error {err}"
    except Exception as err:  # noqa: BLE001 (a probe: report, do not stop)
        state["persisting_l2_bytes"] = f"unavailable: {err}"
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=10)
        state["smi"] = smi.stdout.strip()
    except Exception as err:  # noqa: BLE001
        state["smi"] = f"unavailable: {err}"
    return state


def timed_rotation(fns: dict, phase: str, device, rounds: int, calls: int, n_sets: int,
                   order: str = "balanced") -> list[CallTime]:
    """Series of ``calls`` calls over ``fns`` (label -> fn(set index)) in :func:`series_order`; every call kept
    (``round``: the series' index)."""
    import torch  # noqa: PLC0415

    from mok.bench.harness import _series_ms  # noqa: PLC0415 (the bench's own series)

    out, before = [], "(start)"
    for index, label in enumerate(series_order(list(fns), rounds, order)):
        times, _ = _series_ms(fns[label], torch.device(device), calls, n_sets)
        out += [CallTime(phase, label, index, pos, before, ms) for pos, ms in enumerate(times)]
        before = label
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return out


def plot_predecessors(report: list[dict], path: str, phases: tuple[str, ...] = ("alone", "rotation")) -> str | None:
    """One panel per (shape, backend): every call of ``phases``, grouped by the backend whose series ran just before
    its own (the series' first calls hollow); ``None`` without matplotlib. What round 31's bias looks like: the
    groups after a power-hungry backend sit higher."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    panels = []
    for entry in report:
        calls = [c for c in entry["calls"] if c["phase"] in phases and c["after"] != "(start)"]
        for label in dict.fromkeys(c["label"] for c in calls):
            panels.append((entry["shape"], label, [c for c in calls if c["label"] == label]))
    if not panels:
        return None
    columns = max(1, len({label for _, label, _ in panels}))
    rows = -(-len(panels) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.6 * columns, 3.0 * rows), squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    for ax, (shape, label, calls) in zip(axes.flat, panels):
        befores = sorted({c["after"] for c in calls})
        for x, before in enumerate(befores):
            group = [c for c in calls if c["after"] == before]
            for first in (True, False):
                ys = [c["ms"] for c in group if (c["position"] == 0) == first]
                xs = [x + 0.08 * ((i % 5) - 2) for i in range(len(ys))]  # a little spread, no randomness
                ax.scatter(xs, ys, s=16, facecolors="none" if first else "C0", edgecolors="C0",
                           label=("first call of a series" if first else "later calls") if x == 0 else None)
            later = [c["ms"] for c in group if c["position"] > 0]
            if later:
                ax.hlines(statistics.median(later), x - 0.3, x + 0.3, color="black", linewidth=1)
        ax.set_xticks(range(len(befores)))
        ax.set_xticklabels([f"after {b}" for b in befores], fontsize=7)
        ax.set_title(f"{label} at {shape}", fontsize=8)
        ax.set_ylabel("ms per call", fontsize=7)
        ax.tick_params(labelsize=7)
        ax.grid(axis="y", alpha=0.3)
    axes.flat[0].legend(fontsize=6)
    fig.suptitle("each call by the backend whose series ran just before (bar: median of the later calls)", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="*")
    parser.add_argument("--backends", default="torch,cuda")
    parser.add_argument("--no-sonic", action="store_true", help="only the 'alone' phase twice (a control)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--order", default="balanced", choices=("balanced", "shifted"))
    parser.add_argument("--json", default=None)
    parser.add_argument("--plot", default=None, help="also draw every call by the backend before its series (PNG)")
    parser.add_argument("--replot", default=None, metavar="JSON",
                        help="only draw --plot from an earlier run's --json (no GPU needed)")
    args = parser.parse_args()
    if args.replot:
        with open(args.replot) as f:
            print(plot_predecessors(json.load(f), args.plot or "rotation_probe.png"))
        return

    import torch  # noqa: PLC0415

    from mok.bench.harness import free_memory  # noqa: PLC0415
    from mok.bench.problems import LayerProblem  # noqa: PLC0415
    from mok.config import get_shape  # noqa: PLC0415

    device, n_sets = torch.device("cuda"), 3
    report = []
    for spec in args.shapes:
        shape = get_shape(spec)
        problem = LayerProblem(shape, "bf16", device, n_sets=n_sets, router=True)
        fns = {b: problem.calls(b)["fwd"] for b in args.backends.split(",")}
        for fn in fns.values():
            for w in range(3):
                fn(w % n_sets)
        calls, states = [], {}

        def phase(name, fns_now):
            states[name] = machine_state(device)
            calls.extend(timed_rotation(fns_now, name, device, args.rounds, args.calls, n_sets, args.order))

        phase("alone", fns)
        if args.no_sonic:
            phase("freed", fns)
        else:
            import sonicmoe  # noqa: F401, PLC0415
            phase("imported", fns)
            from mok.bench.baselines import SonicLayer  # noqa: PLC0415
            sonic = SonicLayer(shape, device, n_sets=n_sets)
            for w in range(3):
                sonic.forward(w % n_sets)
            torch.cuda.synchronize(device)
            phase("built", fns)
            phase("rotation", {**fns, "sonicmoe": sonic.forward})
            del sonic
            free_memory(device)
            phase("freed", fns)
        states["end"] = machine_state(device)
        summary = summarize_calls(calls)
        report.append({"shape": shape.name, "summary": summary, "states": states, "calls": [asdict(c) for c in calls]})
        print(f"== {shape.name}")
        for name in [p for p in PHASES if p in summary]:
            for label, row in summary[name].items():
                extra = "".join(f"  first after {b}: {v:.3f}" for b, v in row.get("first_after_ms", {}).items())
                first, later = row.get("first_in_series_ms", 0), row.get("later_in_series_ms", 0)
                print(f"  {name:9s} {label:9s} median {row['median_ms']:8.3f} ms  first {first:8.3f}"
                      f"  later {later:8.3f}{extra}")
        for name, st in states.items():
            print(f"  state {name:9s} {json.dumps(st)}")
        del problem, fns
        free_memory(device)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    if args.plot:
        plot_predecessors(report, args.plot)


if __name__ == "__main__":
    main()
