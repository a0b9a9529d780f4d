"""``python -m mok bench`` (also ``python -m mok.bench``): backends x shapes x precisions, forward and backward.

Examples::

    python -m mok bench --quick                                   # tiny shapes, runs on a CPU (CI)
    python -m mok bench --shapes anchors,ep64 --passes fwd,bwd    # the H200 run (all importable backends)
    python -m mok bench --backends torch,triton --shapes anchor-3 --sonic --iters 50
    python -m mok bench --summarize experiments/results/bench_latest.json

Prints one line per (shape, backend, pass): milliseconds, TFLOP/s, GB/s and the speed-up over each baseline
(``torch``: the PyTorch layer; ``sonicmoe``: SonicMoE when importable: :mod:`mok.bench.baselines`), then
geometric means. Results go to
``--out`` (default ``experiments/results``) and ``$OUT/results`` when ``$OUT`` is set, as
``bench_<stamp>.{json,md,png}`` plus ``bench_latest.*`` copies. Timing method: see :mod:`mok.bench.harness`.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import torch

import mok
from mok.config import ANCHOR_SHAPES, EP64_SLICES, MODELS, PRESETS, TEST_SHAPES, MoEShape, get_shape

from . import harness
from .baselines import SONIC_NAME, SONIC_NOTE, SonicLayer, sonic_available
from .problems import LayerProblem

SHAPE_GROUPS: dict[str, list[MoEShape]] = {
    "anchors": ANCHOR_SHAPES,
    "ep64": EP64_SLICES,
    "tiny": TEST_SHAPES,
    "models": [spec.layer(2048) for spec in MODELS.values()],
}
# Oracles, not contenders: the step-by-step reference and the per-expert loop are far too slow at benchmark
# shapes. They are benchmarked only when named, or in --quick mode.
SLOW_BACKENDS = ("reference", "naive")
BASELINE_BACKEND = "torch"


# ----------------------------------------------------------------------------------------------------------
# Arguments
# ----------------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mok bench", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backends", default="auto",
                   help="comma list, or 'auto': every importable backend that runs on the device "
                        f"(without {', '.join(SLOW_BACKENDS)} unless --quick)")
    p.add_argument("--shapes", default="anchors,ep64",
                   help=f"comma list of preset names ({', '.join(sorted(PRESETS))}), groups "
                        f"({', '.join(SHAPE_GROUPS)}) or custom 'T:H:I:E:K'")
    p.add_argument("--precision", default="bf16", help="comma list of bf16, fp32, mxfp8")
    p.add_argument("--passes", default="fwd,bwd", help="fwd, bwd or both (bwd = (fwd+bwd) - fwd)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls first (default 5; 1 with --quick)")
    p.add_argument("--iters", type=int, default=None, help="timed calls, median reported (default 20; 3 with --quick)")
    p.add_argument("--sets", type=int, default=3, help="input sets rotated so caches do not flatter")
    p.add_argument("--max-seconds", type=float, default=20.0,
                   help="cap on one timed series: fewer iterations (at least 3) for slow calls")
    p.add_argument("--interleave", action="store_true",
                   help="time a shape's backends in rotation (harness.time_rotated: series of back-to-back calls, "
                        "every backend after every other equally often) instead of one backend after another, so "
                        "neither the machine's drift nor the slowdown a power-hungry neighbour leaves favours one "
                        "in the ratios")
    p.add_argument("--rounds", type=int, default=5, help="--interleave: series per backend (each backend's calls are "
                                                          "split over them; rounded up to a multiple of the other "
                                                          "backends' count)")
    p.add_argument("--out", default=None, help="result folder (default experiments/results)")
    p.add_argument("--no-save", action="store_true", help="print only")
    sonic = p.add_mutually_exclusive_group()
    sonic.add_argument("--sonic", dest="sonic", action="store_const", const="on",
                       help="time SonicMoE (error if it does not import)")
    sonic.add_argument("--no-sonic", dest="sonic", action="store_const", const="off", help="skip SonicMoE")
    p.set_defaults(sonic="auto")
    p.add_argument("--sonic-shapes", default=os.environ.get("MOK_SONIC_SHAPES"),
                   help="only these shapes get SonicMoE (its JIT costs minutes per shape); default: "
                        "$MOK_SONIC_SHAPES, else every shape")
    p.add_argument("--sonic-backward", action="store_true",
                   help="also time SonicMoE's fwd+bwd; by default SonicMoE is timed forward only (its backward's "
                        "GEMMs compile every autotuning candidate on first use: about 9 minutes per new shape "
                        "for forward and backward, round 30)")
    p.add_argument("--tokens-scale", type=float, default=1.0, help="multiply every shape's token count")
    p.add_argument("--router", choices=("include", "exclude"), default="include",
                   help="time the router inside the layer (as SonicMoE does) or start from given routing")
    p.add_argument("--ep-size", type=int, default=1, help="emulated expert-parallel ranks for the mok backends")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny shapes, few iterations; runs on a CPU")
    p.add_argument("--progress", choices=("auto", "on", "off"), default="auto",
                   help="progress bar: auto shows it only on a terminal")
    p.add_argument("--summarize", metavar="JSON", default=None,
                   help="print the compact table of a saved result file and exit")
    p.add_argument("--stacks-every", type=float, default=0.0, metavar="SECONDS",
                   help="print every thread's Python stack to stderr every SECONDS while the bench runs (0: never): "
                        "where a call that prints nothing is stuck, e.g. a baseline compiling or autotuning")
    return p


@contextlib.contextmanager
def stack_dumps(seconds: float):
    """Inside the block, every ``seconds`` (if > 0), Python's :mod:`faulthandler` prints all threads' stacks to
    stderr (round 26: SonicMoE's backward ran 460 s with nothing printed, and where it was is not known)."""
    if seconds <= 0:
        yield
        return
    faulthandler.dump_traceback_later(seconds, repeat=True, file=sys.stderr)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def parse_shapes(spec: str, tokens_scale: float, ep_size: int) -> list[MoEShape]:
    """Presets, groups and custom ``T:H:I:E:K`` shapes (``,`` separates entries), tokens scaled."""
    shapes: list[MoEShape] = []
    for item in filter(None, (s.strip() for s in spec.split(","))):
        if item in SHAPE_GROUPS:
            shapes.extend(SHAPE_GROUPS[item])
        else:
            shapes.append(get_shape(item.replace(":", ",")))
    if tokens_scale != 1.0:
        step = max(1, ep_size)
        shapes = [s.with_tokens(max(step, int(round(s.tokens * tokens_scale / step)) * step)) for s in shapes]
    return list(dict.fromkeys(shapes))  # drop repeats, keep order


def _split(spec: str) -> list[str]:
    return [s.strip() for s in spec.split(",") if s.strip()]


# ----------------------------------------------------------------------------------------------------------
# Backend discovery
# ----------------------------------------------------------------------------------------------------------
# A small problem with kernel-friendly sizes (multiples of 128/256, as every benchmark shape has), so a kernel
# with alignment requirements is not rejected by its probe; on a CPU the interpreter needs the tiniest shape.
PROBE_SHAPE_GPU = MoEShape("probe", 256, 512, 256, 8, 2)


def _precision_gap(backend, precision: str) -> str | None:
    """Why ``backend`` (a :class:`mok.backends.Backend`) cannot run ``precision``, or ``None``."""
    if precision not in backend.precisions:
        return f"no {precision} support (supports {', '.join(backend.precisions)})"
    return None


def probe_backend(name: str, device: torch.device, precision: str, run: bool = True) -> str | None:
    """``None`` if backend ``name`` imports, supports ``precision`` and (with ``run``) computes a small forward
    and backward on ``device``; otherwise the reason it cannot."""
    try:
        backend = mok.get_backend(name)
    except (RuntimeError, ValueError) as err:
        return str(err)
    gap = _precision_gap(backend, precision)
    if gap is not None or not run:
        return gap
    try:
        shape = PROBE_SHAPE_GPU if device.type == "cuda" else TEST_SHAPES[0]
        problem = LayerProblem(shape, precision, device, n_sets=1, router=False)
        problem.forward_backward(name, 0)
    except Exception as err:  # a backend that imports may still not run here (no GPU, no interpreter)
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}"
    return None


def unknown_backends_message(spec: str) -> str | None:
    """Why ``--backends`` names something that is no backend at all (a typo, or SonicMoE, which is not a mok backend
    and runs beside them through ``--sonic`` / ``--sonic-shapes``), or ``None``. Checked before anything runs: a
    misspelt name would otherwise cost a failed row per shape, after the baselines' warm-up and compilation."""
    if spec == "auto":
        return None
    known = mok.available_backends()
    unknown = [name for name in _split(spec) if name not in known]
    if not unknown:
        return None
    message = f"--backends: unknown {', '.join(map(repr, unknown))}; mok's backends are {', '.join(known)}"
    if any(name.startswith("sonic") for name in unknown):
        message += (". SonicMoE is not a mok backend: it is timed beside them when it imports (--sonic to insist, "
                    "--sonic-shapes or $MOK_SONIC_SHAPES to limit it to some shapes)")
    return message


def select_backends(spec: str, device: torch.device, precision: str, quick: bool) -> tuple[list[str], dict[str, str]]:
    """``(backends to time, {skipped backend: reason})``; the baseline comes first so ratios print at once.

    Named backends are skipped only when they import and lack ``precision`` (a sweep over several precisions
    names each backend once); one that does not import is timed anyway, so the results record why it failed."""
    skipped: dict[str, str] = {}
    if spec != "auto":
        names = []
        for name in _split(spec):
            try:
                gap = _precision_gap(mok.get_backend(name), precision)
            except (RuntimeError, ValueError):
                gap = None
            if gap is None:
                names.append(name)
            else:
                skipped[name] = gap
    else:
        names = []
        for name in mok.available_backends():
            if name in SLOW_BACKENDS and not quick:
                skipped[name] = "oracle, too slow for benchmark shapes (name it to include it)"
                continue
            # On a GPU an importable backend is timed and a shape it rejects is recorded as an error; on a CPU
            # a backend must also run here (Triton only under TRITON_INTERPRET=1, CUDA never).
            reason = probe_backend(name, device, precision, run=device.type != "cuda")
            if reason is None:
                names.append(name)
            else:
                skipped[name] = reason
    names.sort(key=lambda n: (n != BASELINE_BACKEND, n))
    return names, skipped


# ----------------------------------------------------------------------------------------------------------
# Running
# ----------------------------------------------------------------------------------------------------------
def _error_text(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}"


def passes_of(name: str, passes: list[str], args) -> list[str]:
    """The passes timed for backend ``name``: SonicMoE's backward only with ``--sonic-backward``."""
    if name == SONIC_NAME and not getattr(args, "sonic_backward", False):
        return [p for p in passes if p != "bwd"]
    return passes


def time_calls(calls: dict[str, Any], shape: MoEShape, name: str, precision: str, passes: list[str],
               device: torch.device, args, note: str | None) -> list[dict[str, Any]]:
    """Time ``fwd`` (and ``fwd+bwd`` when the backward is asked for); one record per pass."""
    timing_kw = dict(device=device, n_sets=args.sets, warmup=args.warmup, iters=args.iters,
                     max_seconds=args.max_seconds)
    fwd = harness.time_fn(calls["fwd"], **timing_kw)
    records = []
    if "fwd" in passes:
        records.append(harness.make_record(shape, name, precision, "fwd", fwd, note=note))
    if "bwd" in passes:
        both = harness.time_fn(calls["fwd+bwd"], **timing_kw)
        records.append(backward_record(shape, name, precision, fwd, both, note))
    return records


def rotated_series(fns: dict[str, Any], device: torch.device, args) -> dict[str, harness.Timing]:
    """``harness.time_rotated`` over ``fns`` with about ``args.iters`` calls per backend in ``args.rounds`` rounds,
    fewer (at least one call in each of 3 rounds) when one round of every backend would pass ``args.max_seconds``
    divided by the rounds; each function has run once already (compilation)."""
    rounds = max(1, min(args.rounds, args.iters))
    calls = max(1, -(-args.iters // rounds))
    if args.max_seconds is not None:
        one_round = 0.0
        for fn in fns.values():  # one timed call each, to size the series
            start = time.perf_counter()
            fn(0)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            one_round += time.perf_counter() - start
        while calls > 1 and rounds * calls * one_round > args.max_seconds * len(fns):
            calls -= 1
        while rounds > 3 and rounds * calls * one_round > args.max_seconds * len(fns):
            rounds -= 1
    return harness.time_rotated(fns, device=device, n_sets=args.sets, warmup=args.warmup, rounds=rounds,
                                calls=calls)


def run_rotated(shape: MoEShape, names: list[str], precision: str, passes: list[str], device: torch.device,
                args) -> list[dict]:
    """``--interleave``: every backend of one (shape, precision), timed in rotation; errors become records."""
    records: list[dict] = []
    calls: dict[str, dict[str, Any]] = {}
    notes: dict[str, str | None] = {}
    problem = sonic = None
    try:
        for name in names:
            try:
                if name == SONIC_NAME:
                    sonic = SonicLayer(shape, device, n_sets=args.sets, seed=args.seed)
                    calls[name], notes[name] = sonic.calls(), SONIC_NOTE
                else:
                    if problem is None:  # one set of inputs for every mok backend
                        problem = LayerProblem(shape, precision, device, n_sets=args.sets,
                                               router=args.router == "include", ep_size=args.ep_size, seed=args.seed)
                    calls[name], notes[name] = problem.calls(name), None
                for pass_ in ("fwd", "fwd+bwd") if "bwd" in passes_of(name, passes, args) else ("fwd",):
                    calls[name][pass_](0)  # compile and fail here, not in the middle of a rotation
            except Exception as err:  # noqa: BLE001 (a failing backend must not end the sweep)
                calls.pop(name, None)
                records += [harness.make_record(shape, name, precision, p, None, error=_error_text(err))
                            for p in passes_of(name, passes, args)]
        if not calls:
            return records
        try:
            fwd = rotated_series({n: c["fwd"] for n, c in calls.items()}, device, args)
            with_bwd = {n: c["fwd+bwd"] for n, c in calls.items() if "bwd" in passes_of(n, passes, args)}
            both = rotated_series(with_bwd, device, args) if with_bwd else {}
        except Exception as err:  # noqa: BLE001
            return records + [harness.make_record(shape, n, precision, p, None, error=_error_text(err))
                              for n in calls for p in passes_of(n, passes, args)]
        for name in calls:
            if "fwd" in passes:
                records.append(harness.make_record(shape, name, precision, "fwd", fwd[name], note=notes[name]))
            if "bwd" in passes_of(name, passes, args):
                records.append(backward_record(shape, name, precision, fwd[name], both[name], notes[name]))
        return records
    finally:
        del problem, sonic, calls
        harness.free_memory(device)


def backward_record(shape: MoEShape, name: str, precision: str, fwd: harness.Timing, both: harness.Timing,
                    note: str | None) -> dict[str, Any]:
    """The bwd record: median(fwd+bwd) - median(fwd), or an error-free record saying the difference was noise.
    Where the fwd+bwd calls marked their backward's start (``harness.mark_backward_start``), the record also
    holds ``direct_ms`` / ``direct_tflops``: the median of each call's time from that mark to its end."""
    bwd_ms = both.median_ms - fwd.median_ms
    if bwd_ms > 0:
        # The spread of a difference of medians is not the difference of spreads: keep fwd+bwd's own.
        bwd = harness.Timing(bwd_ms, both.p10_ms - fwd.median_ms, both.p90_ms - fwd.median_ms, both.iters,
                             both.method + ", (fwd+bwd)-fwd")
        record = harness.make_record(shape, name, precision, "bwd", bwd, note=note)
        if both.backward is not None:
            record["direct_ms"] = both.backward.median_ms
            record["direct_tflops"] = harness.tflops(record["flops"], both.backward.median_ms)
        return record
    # timing noise larger than the backward itself (tiny shapes on a busy CPU)
    return harness.make_record(shape, name, precision, "bwd", None,
                               note=f"backward not resolved: fwd+bwd {both.median_ms:.4f} ms <= fwd "
                                    f"{fwd.median_ms:.4f} ms")


def run_cell(shape: MoEShape, name: str, precision: str, passes: list[str], device: torch.device, args) -> list[dict]:
    """All passes of one (shape, backend, precision); errors become records instead of exceptions."""
    problem = None
    try:
        if name == SONIC_NAME:
            problem = SonicLayer(shape, device, n_sets=args.sets, seed=args.seed)
            return time_calls(problem.calls(), shape, name, precision, passes_of(name, passes, args), device, args,
                              SONIC_NOTE)
        problem = LayerProblem(shape, precision, device, n_sets=args.sets, router=args.router == "include",
                               ep_size=args.ep_size, seed=args.seed)
        return time_calls(problem.calls(name), shape, name, precision, passes, device, args, None)
    except Exception as err:  # record and go on: one failing backend must not end a long sweep
        return [harness.make_record(shape, name, precision, p, None, error=_error_text(err))
                for p in passes_of(name, passes, args)]
    finally:
        del problem
        harness.free_memory(device)


def _progress(total: int, mode: str):
    from tqdm.auto import tqdm
    disable = {"auto": None, "on": False, "off": True}[mode]  # None: only on a terminal
    return tqdm(total=total, disable=disable, desc="bench", unit="cell", dynamic_ncols=True, file=sys.stderr)


def _write(records: list[dict], metadata: dict, settings: dict, out_dirs: list[Path], stamp: str,
           png: bool) -> list[Path]:
    doc = harness.result_document(records, metadata, settings)
    written = []
    for folder in out_dirs:
        stem = folder / f"bench_{stamp}"
        paths = [harness.write_json(doc, stem.with_suffix(".json")),
                 harness.write_markdown(doc, stem.with_suffix(".md"))]
        if png:
            paths.append(harness.write_png(doc, stem.with_suffix(".png")))
        for path in filter(None, paths):
            shutil.copyfile(path, folder / f"bench_latest{path.suffix}")
            written.append(path)
    return written


def print_geomeans(summary: dict[str, dict[str, dict[str, Any]]]) -> None:
    """One line per backend and precision/pass of :func:`mok.bench.harness.geomean_summary`."""
    for backend, entries in summary.items():
        for key, entry in entries.items():
            extra = "  ".join(f"{k}={v:.2f}x" for k, v in entry.items() if k.startswith("vs_") and v)
            print(f"geomean {backend:<9} {key:<9} {entry['tflops']:8.1f} TFLOP/s over {entry['shapes']} shapes  {extra}")


def summarize_file(path: str) -> int:
    """Print the compact table of a saved result document."""
    doc = json.loads(Path(path).read_text())
    recs = doc["results"]
    harness.add_ratios(recs)
    meta = doc["metadata"]
    print(f"bench {meta['date']} on {meta.get('gpu') or meta['device_type']} commit {meta.get('git_commit')}")
    for rec in recs:
        print(harness.format_line(rec))
    print_geomeans(harness.geomean_summary(recs))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; returns 0 when every requested cell ran, 2 if some failed, 1 if none ran."""
    args = build_parser().parse_args(argv)
    if args.summarize:
        return summarize_file(args.summarize)
    with stack_dumps(args.stacks_every):
        return _run(args, argv)


def _run(args: argparse.Namespace, argv: list[str] | None) -> int:
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.quick:
        if args.shapes == build_parser().get_default("shapes"):
            args.shapes = "tiny"
        args.warmup = 1 if args.warmup is None else args.warmup
        args.iters = 3 if args.iters is None else args.iters
        args.sets = min(args.sets, 2)
        if args.sonic == "auto":
            args.sonic = "off"
    args.warmup = 5 if args.warmup is None else args.warmup
    args.iters = 20 if args.iters is None else args.iters
    passes = [p for p in _split(args.passes) if p in harness.PASSES]
    if not passes:
        print(f"--passes must name fwd and/or bwd, got {args.passes!r}", file=sys.stderr)
        return 1
    unknown = unknown_backends_message(args.backends)
    if unknown:
        print(unknown, file=sys.stderr)
        return 1
    shapes = parse_shapes(args.shapes, args.tokens_scale, args.ep_size)
    precisions = _split(args.precision)

    use_sonic = False
    if args.sonic != "off" and device.type == "cuda":
        ok, why = sonic_available()
        use_sonic = ok
        if not ok and args.sonic == "on":
            print(f"SonicMoE requested but unavailable: {why}", file=sys.stderr)
    sonic_shapes = set(_split(args.sonic_shapes)) if args.sonic_shapes else None
    if use_sonic and not passes_of(SONIC_NAME, passes, args):
        print("SonicMoE skipped: it is timed forward only unless --sonic-backward is given, and --passes has no fwd")

    plan: list[tuple[MoEShape, str, str]] = []
    skipped_all: dict[str, dict[str, str]] = {}
    for precision in precisions:
        names, skipped = select_backends(args.backends, device, precision, args.quick)
        skipped_all[precision] = skipped
        for reason_name, reason in skipped.items():
            print(f"skip backend {reason_name} ({precision}): {reason}")
        for shape in shapes:
            row = list(names)
            if use_sonic and precision == "bf16" and (sonic_shapes is None or shape.name in sonic_shapes) \
                    and passes_of(SONIC_NAME, passes, args):
                row.insert(1 if BASELINE_BACKEND in row else 0, SONIC_NAME)
            plan += [(shape, name, precision) for name in row]
    if not plan:
        print("nothing to run: no usable backend", file=sys.stderr)
        return 1

    metadata = harness.collect_metadata(device)
    settings = {
        "argv": list(argv) if argv is not None else sys.argv[1:], "device": str(device),
        "shapes": [s.name for s in shapes], "precisions": precisions, "passes": passes,
        "warmup": args.warmup, "iters": args.iters, "sets": args.sets, "max_seconds": args.max_seconds,
        "tokens_scale": args.tokens_scale, "ep_size": args.ep_size, "router": args.router,
        "sonic": use_sonic, "sonic_backward": args.sonic_backward, "skipped_backends": skipped_all,
        "timing": ("CUDA events" if device.type == "cuda" else "host clock") + f", median of up to {args.iters} "
                  f"calls after {args.warmup} warm-up calls, rotating {args.sets} input sets; autograd enabled; "
                  "bwd = median(fwd+bwd) - median(fwd)" +
                  (f"; a shape's backends timed in rotation (up to {args.rounds} series of back-to-back calls "
                   "each, rounded up; every backend after every other equally often)"
                   if args.interleave else "; one backend after another"),
        "router_note": ("mok backends are timed with the router (x @ W_r^T, softmax top-k) inside the layer, "
                        "as SonicMoE always is" if args.router == "include" else
                        "mok backends start from precomputed routing; SonicMoE rows include its router"),
    }
    out_dirs = [] if args.no_save else harness.output_dirs(args.out)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())

    from tqdm.auto import tqdm
    print(f"mok bench: {len(shapes)} shapes x {len(precisions)} precisions on {metadata.get('gpu') or device}; "
          f"passes {','.join(passes)}; {settings['timing']}")
    records: list[dict[str, Any]] = []
    bar = _progress(len(plan), args.progress)
    try:
        # Cells of one (shape, precision) are consecutive in the plan: one unit with --interleave.
        units: list[list[tuple[MoEShape, str, str]]] = []
        for cell_key in plan:
            if args.interleave and units and (units[-1][0][0], units[-1][0][2]) == (cell_key[0], cell_key[2]):
                units[-1].append(cell_key)
            else:
                units.append([cell_key])
        for index, unit in enumerate(units):
            shape, precision = unit[0][0], unit[0][2]
            names = [name for _, name, _ in unit]
            bar.set_postfix_str(f"{shape.name} {','.join(names)}", refresh=False)
            if args.interleave:
                cell = run_rotated(shape, names, precision, passes, device, args)
            else:
                cell = run_cell(shape, names[0], precision, passes, device, args)
            records.extend(cell)
            harness.add_ratios(records)
            for rec in cell:
                tqdm.write(harness.format_line(rec))
            bar.update(len(unit))
            last_of_shape = index + 1 == len(units) or units[index + 1][0][0] != shape
            if out_dirs and last_of_shape:  # save as we go: a run cut short still leaves its data
                _write(records, metadata, settings, out_dirs, stamp, png=False)
    finally:
        bar.close()

    doc = harness.result_document(records, metadata, settings)
    print()
    print_geomeans(doc["geomean"])
    if out_dirs:
        for path in _write(records, metadata, settings, out_dirs, stamp, png=True):
            print(f"wrote {path}")
    failed = sum(1 for r in records if r["error"])
    if failed == len(records):
        return 1
    return 2 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
