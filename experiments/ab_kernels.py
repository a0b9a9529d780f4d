"""EXPERIMENT: two builds of the megakernel in one process, timed interleaved, and compared bit for bit.

"A" is mok/cuda as it is; "B" is a copy of its ``include/`` and ``csrc/`` with a patch applied (``--patch``, e.g.
a candidate from the results folder; only its ``mok/cuda/`` hunks are used) or another directory holding
``include/`` and ``csrc/`` (``--tree``). Both are built as separately named torch extensions
(:func:`mok.cuda.build.load_extension` with ``source_root``) and launched on the same prepared inputs in rounds
whose order rotates (a fixed order favours whichever runs first after the slower one: round 8 measured up to 5% at
the large anchors), median per build. Separate processes would add the machine's run-to-run drift (a few percent)
to the comparison. Then the outputs are compared bit for bit (a candidate that must not change numerics has to
give the same bits). Run on the H200 from the repository root::

    python3 experiments/ab_kernels.py --patch experiments/results/h200_2026-11-29_round8/round9_candidates.patch \\
        anchor-1 anchor-4 kimi-k2.7/ep64

A runtime switch instead of a build: without ``--patch`` or ``--tree`` both are this tree's build, and
``--launch-a`` / ``--launch-b`` give each its own :func:`mok.cuda.backend.launch` options (``--prepare`` passes
options to :func:`mok.cuda.backend.prepare` for both), e.g. the early combine against the combine tail::

    python3 experiments/ab_kernels.py --prepare early_combine=1 --launch-a early_combine=0 \\
        --launch-b early_combine=1 anchor-1 anchor-5

``--prepare-a`` / ``--prepare-b`` give each side its own prepared launch (its own workspace), and a
:class:`mok.MoKConfig` field among them (``minibatch_rows``, ``ring_rows``, ``policy``, ...) goes into the prepare's
``config``: e.g. the minibatch size, which changes no bit::

    python3 experiments/ab_kernels.py --prepare-b minibatch_rows=8192 anchor-3 anchor-5
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "experiments"))


def patched_tree(patch: Path, workdir: Path) -> Path:
    """A copy of mok/cuda's include/ and csrc/ under ``workdir`` with the patch's mok/cuda hunks applied; returns
    the directory to pass as ``source_root``."""
    root = workdir / "mok" / "cuda"
    for part in ("include", "csrc"):
        shutil.copytree(REPO / "mok" / "cuda" / part, root / part)
    # git apply works outside a repository; --include keeps the hunks that touch the kernel sources.
    subprocess.run(["git", "apply", "--include=mok/cuda/include/*", "--include=mok/cuda/csrc/*",
                    str(patch.resolve())], cwd=workdir, check=True)
    return root


def parse_options(pairs: list[str]) -> dict:
    """``KEY=VALUE`` strings as keyword arguments: integers as ints, true/false as bools, anything else a string."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"expected KEY=VALUE with KEY a name, got {pair!r}")
        lowered = value.strip().lower()
        if lowered in ("true", "false"):
            options[key] = lowered == "true"
        else:
            try:
                options[key] = int(value)
            except ValueError:
                options[key] = value
    return options


def build_launch_options(dispatch: str | None, pairs_a: list[str], pairs_b: list[str]) -> dict[str, dict]:
    """Each build's launch options: ``--dispatch`` for both (when given), unless a build's own ``dispatch=``
    (``--launch-a`` / ``--launch-b``) overrides it, which is how one build is compared in ring and in gather mode."""
    common = {} if dispatch is None else {"dispatch": dispatch}
    return {label: {**common, **parse_options(pairs)} for label, pairs in (("A", pairs_a), ("B", pairs_b))}


def prepare_kwargs(options: dict) -> dict:
    """``backend.prepare`` keyword arguments from parsed options: :class:`mok.MoKConfig` fields are gathered into
    ``config`` (a MoKConfig), the rest pass through."""
    import dataclasses  # noqa: PLC0415

    from mok.config import MoKConfig  # noqa: PLC0415

    fields = {field.name for field in dataclasses.fields(MoKConfig)}
    config = {key: value for key, value in options.items() if key in fields}
    kwargs = {key: value for key, value in options.items() if key not in fields}
    if config:
        kwargs["config"] = MoKConfig(**config)
    return kwargs


def build_prepare_options(pairs: list[str], pairs_a: list[str], pairs_b: list[str]) -> dict[str, dict]:
    """Each side's prepare options: ``--prepare`` for both, then ``--prepare-a`` / ``--prepare-b`` on top."""
    common = parse_options(pairs)
    return {label: {**common, **parse_options(own)} for label, own in (("A", pairs_a), ("B", pairs_b))}


def smi_index() -> str:
    """nvidia-smi's index of the current CUDA device (through CUDA_VISIBLE_DEVICES when it is set)."""
    import torch  # noqa: PLC0415 (as main(): the CPU tests import this file without a GPU)

    current = torch.cuda.current_device()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    return visible.split(",")[current].strip() if visible else str(current)


def read_clock_log(path: Path) -> list[tuple[float, float, float]]:
    """(unix time, SM clock MHz, power W) samples of an ``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw
    --format=csv,noheader,nounits`` log, gzipped (``.gz``, as the results folders keep them) or not; unreadable lines
    are skipped."""
    text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            continue
        try:
            stamp = datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
            samples.append((stamp, float(parts[1]), float(parts[2])))
        except ValueError:
            continue
    return samples


def start_clock_sampler(path: Path) -> subprocess.Popen:
    """nvidia-smi writing (timestamp, SM clock, power) of the current GPU every 50 ms into ``path`` until terminated
    (read it with :func:`read_clock_log`). Only the GPU the kernels run on: on a machine with several, nvidia-smi
    would list each per sample (round 9's first log on two H200s mixed the idle one's 345 MHz and ~78 W in).
    NOTE: its standard streams go nowhere: one inherited from a caller's pipe (gpu_run.sh tees every stage) keeps the
    pipe open after this process dies, and the stage then waits for it (round 16: a failed A/B held its call for the
    whole 600 s). Callers terminate it in a ``finally``."""
    return subprocess.Popen(["nvidia-smi", "-i", smi_index(), "--query-gpu=timestamp,clocks.sm,power.draw",
                             "--format=csv,noheader,nounits", "-lms", "50", "-f", str(path)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def clock_medians(samples: list[tuple[float, float, float]], start: float, stop: float) -> tuple[float, float, list]:
    """(median SM clock MHz, median power W, the samples) of the samples taken in [start, stop] (unix times); NaN
    medians when there are none."""
    inside = [(mhz, watts) for stamp, mhz, watts in samples if start <= stamp <= stop]
    if not inside:
        return float("nan"), float("nan"), inside
    return statistics.median(m for m, _ in inside), statistics.median(w for _, w in inside), inside


def clock_summary(samples: list[tuple[float, float, float]], start: float, stop: float) -> str:
    """Median SM clock and power of the samples taken in [start, stop] (unix times)."""
    mhz, watts, inside = clock_medians(samples, start, stop)
    if not inside:
        return "no clock samples"
    return (f"SM clock median {mhz:.0f} MHz (min {min(m for m, _ in inside):.0f}), "
            f"power median {watts:.0f} W, {len(inside)} samples")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--patch", type=Path, help="a patch against this tree (its mok/cuda hunks make build B)")
    source.add_argument("--tree", type=Path, help="a directory with include/ and csrc/ for build B")
    parser.add_argument("--launch-a", action="append", default=[], metavar="KEY=VALUE",
                        help="a backend.launch option for A (repeatable)")
    parser.add_argument("--launch-b", action="append", default=[], metavar="KEY=VALUE",
                        help="a backend.launch option for B (repeatable)")
    parser.add_argument("--prepare", action="append", default=[], metavar="KEY=VALUE",
                        help="a backend.prepare option for both (repeatable; MoKConfig fields go into its config)")
    parser.add_argument("--prepare-a", action="append", default=[], metavar="KEY=VALUE",
                        help="a backend.prepare option for A only (repeatable)")
    parser.add_argument("--prepare-b", action="append", default=[], metavar="KEY=VALUE",
                        help="a backend.prepare option for B only (repeatable)")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--launches", type=int, default=3, help="launches per build and round")
    parser.add_argument("--dispatch", default=None, help="ring, gather or auto (default: the backend's default)")
    parser.add_argument("--clock-log", type=Path, default=None,
                        help="sample SM clock and power with nvidia-smi every 50 ms into this file and print them per "
                             "shape (does the GPU run at its power limit?)")
    parser.add_argument("--saved-rows", action="store_true",
                        help="a training forward: the kernel also writes the saved gate/up rows (compared bit for bit "
                             "too)")
    parser.add_argument("shapes", nargs="*", default=["anchor-1", "anchor-4", "kimi-k2.7/ep64"])
    args = parser.parse_args(argv)
    launch_options = build_launch_options(args.dispatch, args.launch_a, args.launch_b)
    prepare_options = build_prepare_options(args.prepare, args.prepare_a, args.prepare_b)
    if (args.patch is None and args.tree is None and launch_options["A"] == launch_options["B"]
            and prepare_options["A"] == prepare_options["B"]):
        parser.error("give --patch or --tree, or launch or prepare options that differ between A and B")

    import torch  # noqa: PLC0415

    from mok.cuda.build import load_extension  # noqa: PLC0415
    from mok.cuda.workspace import release_workspaces  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        tree_b = patched_tree(args.patch, Path(tmp)) if args.patch else args.tree
        builds = {"A": load_extension(), "B": load_extension(source_root=tree_b) if tree_b else load_extension()}
    for label in builds:
        where = "this tree" if label == "A" or not (args.patch or args.tree) else (args.patch or args.tree)
        print(f"{label} = {builds[label].__name__} ({where}), launch options {launch_options[label] or 'default'}")
    if prepare_options["A"] or prepare_options["B"]:
        print(f"prepare options: A {prepare_options['A'] or 'default'}, B {prepare_options['B'] or 'default'}")

    sampler = start_clock_sampler(args.clock_log) if args.clock_log is not None else None
    windows = {}
    try:
        for name in args.shapes:
            window_start = time.time()
            try:
                compare_at_shape(name, builds, launch_options, prepare_options, args)
            except ValueError as err:  # e.g. a launch option this shape cannot take: the other shapes still run
                print(f"{name}: skipped ({err})", flush=True)
                continue
            windows[name] = (window_start, time.time())
            release_workspaces()
            torch.cuda.empty_cache()
    finally:
        if sampler is not None:
            sampler.terminate()
            sampler.wait()
    if sampler is not None:
        samples = read_clock_log(args.clock_log)
        for name, (start, stop) in windows.items():
            print(f"{name}: {clock_summary(samples, start, stop)}")


def compare_at_shape(name: str, builds: dict, launch_options: dict, prepare_options: dict, args) -> None:
    """Builds A and B at preset ``name``: outputs compared bit for bit, then timed interleaved; prints one line."""
    import torch  # noqa: PLC0415

    from cuda_breakdown import SHAPES, Problem  # noqa: PLC0415
    from mok.bench.harness import time_interleaved  # noqa: PLC0415
    from mok.cuda import backend  # noqa: PLC0415

    shape = SHAPES[name]
    problem = Problem(shape, n_sets=2)

    def prepared(options: dict) -> tuple[list, list]:
        """Both input sets prepared with ``options``, and their saved-rows buffers (None each without
        --saved-rows)."""
        side = [problem.prepare(j, **prepare_kwargs(options)) for j in range(2)]
        return side, [backend.saved_gate_up_buffer(prep) if args.saved_rows else None for prep in side]

    # One prepared pair per distinct set of prepare options (shared when A's and B's agree).
    preps, saved = {}, {}
    preps["A"], saved["A"] = prepared(prepare_options["A"])
    preps["B"], saved["B"] = ((preps["A"], saved["A"]) if prepare_options["B"] == prepare_options["A"]
                              else prepared(prepare_options["B"]))
    outs = {}
    for label, ext in builds.items():
        prep, saved0 = preps[label][0], saved[label][0]
        prep.out.fill_(float("nan"))  # poisoned for each build, so rows it leaves unwritten show
        if saved0 is not None:
            saved0.fill_(float("nan"))
        out = backend.launch(prep, extension=ext, saved_gate_up=saved0, **launch_options[label]).clone()
        outs[label] = (out,) if saved0 is None else (out, saved0.clone())
        backend.check_error(prep)
    same = all(torch.equal(a.view(torch.int16), b.view(torch.int16)) for a, b in zip(outs["A"], outs["B"]))
    launches = {label: (lambda j, ext=ext, label=label: backend.launch(
                            preps[label][j], extension=ext, saved_gate_up=saved[label][j], **launch_options[label]))
                for label, ext in builds.items()}
    timings = time_interleaved(launches, device=preps["A"][0].out.device, rounds=args.rounds, calls=args.launches)
    for label in preps:
        backend.check_error(preps[label][0])
    med = {label: t.median_ms for label, t in timings.items()}
    print(f"{name}: A {med['A']:.3f} ms ({shape.forward_flops / med['A'] / 1e9:.0f} TFLOP/s), "
          f"B {med['B']:.3f} ms ({shape.forward_flops / med['B'] / 1e9:.0f} TFLOP/s), "
          f"B/A time {med['B'] / med['A']:.3f}; outputs{' and saved rows' if args.saved_rows else ''} bitwise "
          f"equal: {same}", flush=True)


if __name__ == "__main__":
    main()
