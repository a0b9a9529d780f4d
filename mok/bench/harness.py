"""The benchmark harness: timing, FLOP and byte accounting, result metadata, and the JSON/markdown/PNG writers.

Everything a benchmark needs that is not about a particular backend lives here, so that ``python -m mok bench``,
the experiments and the notebooks measure and report the same way.

Timing
------
* CUDA events around each call, after a warm-up; the **median** of many calls is the result (p10/p90 are kept
  to judge the spread). On a CPU (the ``--quick`` CI mode) a host clock is used instead.
* The timed function receives an input-set index and the harness **rotates** through several input sets, so
  that a problem whose inputs fit in the 50 MB L2 is not timed on warm caches.
* Backward time is **(forward + backward) minus forward**, each the median of its own series, with autograd
  enabled in both (the forward as it runs in training, saving what the backward needs). A retained graph is
  not used because the MoK backends free their saved state in the backward (``once_differentiable``).

Accounting (background.md, section 4)
-------------------------------------
* FLOPs: ``6 * T * K * H * I`` forward (gate, up and down GEMMs at 2 FLOPs per multiply-add), twice that
  backward (data and weight gradients). The router is excluded, also when it is timed.
* Bytes: the fewest bytes the layer must move through device memory, each tensor read or written once:
  forward ``x + weights + out + routing``; backward ``dO + x + weights + routing + dx + dWeights + dRouterWeights``.
  Activations saved by the forward are not counted: a kernel may recompute them (MoK replays the ring).
"""

from __future__ import annotations

import datetime as _dt
import gc
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

import torch

from ..config import MoEShape

SCHEMA = "mok.bench/1"
PASSES = ("fwd", "bwd")
BASELINES = ("torch", "sonicmoe")

# Bytes per element of (activations, weights) for each precision. MXFP8 weights are E4M3 (1 byte) plus one
# E8M0 scale byte per 32 elements along K; activations enter and leave the layer in bf16.
_ELEMENT_BYTES = {"bf16": (2.0, 2.0), "fp32": (4.0, 4.0), "mxfp8": (2.0, 1.0 + 1.0 / 32.0)}
_ROUTING_BYTES_PER_SLOT = 4 + 4  # int32 expert id + fp32 router weight


# ----------------------------------------------------------------------------------------------------------
# FLOPs and bytes
# ----------------------------------------------------------------------------------------------------------
def layer_flops(shape: MoEShape, pass_: str) -> int:
    """Useful FLOPs of one layer call: ``6*T*K*H*I`` for ``"fwd"``, twice that for ``"bwd"`` (router excluded)."""
    if pass_ == "fwd":
        return shape.forward_flops
    if pass_ == "bwd":
        return shape.backward_flops
    raise ValueError(f"pass_ must be 'fwd' or 'bwd', got {pass_!r}")


def layer_traffic(shape: MoEShape, pass_: str, precision: str = "bf16") -> dict[str, int]:
    """The fewest bytes one layer call must move, by tensor (see the module docstring).

    Args:
        shape: the layer problem (T tokens, H, I, E experts, top-k K).
        pass_: ``"fwd"`` or ``"bwd"``.
        precision: ``"bf16"``, ``"fp32"`` or ``"mxfp8"`` (weights 1 byte plus a scale byte per 32 elements).
    Returns:
        ``{tensor name: bytes}``; :func:`layer_bytes` is the sum.
    """
    if precision not in _ELEMENT_BYTES:
        raise ValueError(f"precision must be one of {sorted(_ELEMENT_BYTES)}, got {precision!r}")
    act, wgt = _ELEMENT_BYTES[precision]
    t, h, i, e, k = shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k
    token_rows = int(t * h * act)                       # one [T, H] activation tensor
    weights = int(round(3 * e * i * h * wgt))           # w_gate + w_up + w_down
    routing = t * k * _ROUTING_BYTES_PER_SLOT           # topk_ids + topk_weights
    if pass_ == "fwd":
        return {"x": token_rows, "weights": weights, "out": token_rows, "routing": routing}
    if pass_ == "bwd":
        # Weight gradients are produced in the activation dtype (bf16 / fp32), whatever the weights' format.
        return {"grad_out": token_rows, "x": token_rows, "weights": weights, "routing": routing,
                "grad_x": token_rows, "grad_weights": int(3 * e * i * h * act), "grad_router_weights": t * k * 4}
    raise ValueError(f"pass_ must be 'fwd' or 'bwd', got {pass_!r}")


def layer_bytes(shape: MoEShape, pass_: str, precision: str = "bf16") -> int:
    """Total of :func:`layer_traffic`."""
    return sum(layer_traffic(shape, pass_, precision).values())


def tflops(flops: float, ms: float) -> float:
    """FLOPs over milliseconds, in TFLOP/s."""
    return flops / (ms * 1e-3) / 1e12


def gbps(nbytes: float, ms: float) -> float:
    """Bytes over milliseconds, in GB/s (10^9 bytes per second)."""
    return nbytes / (ms * 1e-3) / 1e9


def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of the positive finite values; ``None`` when there are none."""
    vals = [v for v in values if v is not None and math.isfinite(v) and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


# ----------------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """A timed series: the median and spread of ``iters`` calls, in milliseconds."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    iters: int
    method: str  # "cuda-events" or "host-clock"
    # Where every call marked the start of its backward (:func:`mark_backward_start`): the same calls from the mark
    # to their end, i.e. the backward's own time inside the training step.
    backward: "Timing | None" = None


def _percentile(sorted_vals: list[float], q: float) -> float:
    pos = q * (len(sorted_vals) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (pos - lo)


def summarize(times_ms: list[float], method: str, backward_ms: list[float] | None = None) -> Timing:
    """Median and p10/p90 of a list of per-call times (and of their backward parts, when every call marked one)."""
    if not times_ms:
        raise ValueError("no timings to summarize")
    ordered = sorted(times_ms)
    backward = (summarize(backward_ms, method + ", from the backward's start")
                if backward_ms and len(backward_ms) == len(times_ms) else None)
    return Timing(statistics.median(ordered), _percentile(ordered, 0.1), _percentile(ordered, 0.9),
                  len(ordered), method, backward)


def time_fn(fn: Callable[[int], Any], *, device: torch.device | str, n_sets: int = 1, warmup: int = 5,
            iters: int = 20, max_seconds: float | None = None, min_iters: int = 3) -> Timing:
    """Time ``fn(set_index)``: warm-up, then ``iters`` calls rotating over ``n_sets`` input sets.

    Args:
        fn: runs one call on input set ``set_index`` (``0 <= set_index < n_sets``); its result is dropped.
        device: where ``fn`` runs; CUDA devices are timed with CUDA events, others with a host clock.
        n_sets: input sets to rotate through, so caches do not flatter small problems.
        warmup: untimed calls first (compilation, autotuning caches, allocator growth).
        iters: timed calls (the median is reported).
        max_seconds: if set, fewer timed calls are made (at least ``min_iters``) so that the series takes
            about this long, judged from the last warm-up call (the first ones pay for compilation).
    Returns:
        :class:`Timing` in milliseconds.
    """
    device = torch.device(device)
    is_cuda = device.type == "cuda"
    n_sets = max(1, n_sets)

    def sync():
        if is_cuda:
            torch.cuda.synchronize(device)

    last = 0.0
    for w in range(max(warmup, 1 if max_seconds else 0)):
        start = time.perf_counter()
        fn(w % n_sets)
        sync()
        last = time.perf_counter() - start
    if max_seconds is not None and last > 0:
        iters = max(min_iters, min(iters, int(max_seconds / last)))

    times, backward = _series_ms(fn, device, iters, n_sets)
    return summarize(times, "cuda-events" if is_cuda else "host-clock", backward)


def time_graph_ms(fn: Callable[[], Any], iters: int, warmup: int = 2, repeats: int = 16) -> float:
    """Median milliseconds of one ``fn()`` on the device: ``repeats`` calls captured in one CUDA graph, its replays
    timed back to back (:func:`time_fn`), each replay's time divided by ``repeats``. For short pieces whose own kernel
    launches from the host would otherwise be what is timed (a layer hides them behind the kernel of the call before):
    one call per graph still timed the graph's launch (round 24: a two-kernel sort of about 9 us of kernel time read
    17 us), ``repeats`` of them in a row hide it as the layer does. ``fn`` runs once on a side stream first
    (allocator, temporary storage), outside the capture; a capture failure raises."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(repeats):
            fn()
    return time_fn(lambda _: graph.replay(), device="cuda", warmup=warmup, iters=iters).median_ms / repeats


# The boundaries marked inside the series being timed: (on CUDA?, [CUDA event or host time, ...]); None otherwise.
_BACKWARD_MARKS: tuple[bool, list] | None = None


def mark_backward_start() -> None:
    """Mark where a timed forward + backward call's backward begins: call it after the forward's launches and
    before the backward's. While :func:`time_fn` or :func:`time_rotated` times a series, this records a CUDA event
    on the current stream (or the host clock), and the series' :class:`Timing` gets ``backward``: each call's time
    from the mark to its end. That is the backward's own time inside the step, in the step's own power state,
    where ``median(fwd+bwd) - median(fwd)`` subtracts a forward timed in another series (round 31's call 5: the
    two agreed within 0.5% for `cuda` at anchor-5, 24.17 against 24.29 ms, and differed by up to 8% elsewhere:
    SonicMoE's anchor-2 backward 12.73 direct, 13.80 by difference). Outside a timed series it does nothing."""
    if _BACKWARD_MARKS is None:
        return
    on_cuda, points = _BACKWARD_MARKS
    if on_cuda:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        points.append(event)
    else:
        points.append(time.perf_counter())


def _series_ms(fn: Callable[[int], Any], device: torch.device, calls: int,
               n_sets: int) -> tuple[list[float], list[float] | None]:
    """``calls`` calls of ``fn(call % n_sets)`` in a row, each timed in ms: on CUDA by events around it, with no
    synchronisation until the last (the host may run ahead, as in training), else by the host clock. Second: each
    call's time from its :func:`mark_backward_start` to its end, if every call marked exactly once (else None)."""
    global _BACKWARD_MARKS
    on_cuda = device.type == "cuda"
    points: list = []
    marks_after: list[int] = []  # marks recorded by the end of each call
    _BACKWARD_MARKS = (on_cuda, points)
    try:
        if on_cuda:
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(calls)]
            for call in range(calls):
                starts[call].record()
                fn(call % n_sets)
                ends[call].record()
                marks_after.append(len(points))
            torch.cuda.synchronize(device)
            times = [s.elapsed_time(e) for s, e in zip(starts, ends)]
        else:
            starts, ends = [], []
            for call in range(calls):
                starts.append(time.perf_counter())
                fn(call % n_sets)
                ends.append(time.perf_counter())
                marks_after.append(len(points))
            times = [(e - s) * 1e3 for s, e in zip(starts, ends)]
    finally:
        _BACKWARD_MARKS = None
    if marks_after != list(range(1, calls + 1)):
        return times, None
    if on_cuda:
        return times, [p.elapsed_time(e) for p, e in zip(points, ends)]
    return times, [(e - p) * 1e3 for p, e in zip(points, ends)]


def balanced_series_order(labels: list[str], rounds: int, previous: str | None = None) -> list[str]:
    """The order in which ``labels`` run their series: every label runs after every other label equally often and
    never right after itself, each label ``rounds`` times rounded up to a multiple of ``len(labels) - 1``.

    Why: the H200 remembers what ran before. A whole series right after a power-hungry backend runs slower, likely
    at a lower clock under the 700 W limit (round 31's call 2, ``experiments/rotation_probe.py``: `cuda`'s anchor-5
    calls after torch 9.3-10.1 ms, after `cuda` itself or SonicMoE 10.2-11.1 ms; the clock was not sampled per call).
    Rotating a fixed order by one label per round put `cuda` after SonicMoE in 4 of 5 rounds and SonicMoE after
    torch, the least power-hungry backend, in 3 of 5, which read `cuda`'s anchor-2 forward 7% slower than runs
    without SonicMoE. Here every ordered pair of labels is one step
    of a closed walk through all of them (an Eulerian circuit of the complete directed graph), which starts and
    ends at ``previous`` (the label that ran just before, e.g. the last one warmed up; default the last label), so
    the step from ``previous`` to the first series counts as one of the pairs.
    """
    n = len(labels)
    if n == 0 or rounds < 1:
        return []
    if n == 1:
        return list(labels) * rounds
    start = labels.index(previous) if previous in labels else n - 1
    # Hierholzer's algorithm: walk unused edges until stuck, then back up, splicing the detours into the circuit.
    unused = {a: [b for b in range(n) if b != a] for a in range(n)}
    stack, circuit = [start], []
    while stack:
        here = stack[-1]
        if unused[here]:
            stack.append(unused[here].pop(0))
        else:
            circuit.append(stack.pop())
    one_cycle = circuit[::-1][1:]  # n (n - 1) series, ending at ``start``: the next cycle follows on
    cycles = -(-rounds // (n - 1))
    return [labels[i] for i in one_cycle * cycles]


def time_interleaved(fns: dict[str, Callable[[int], Any]], *, device: torch.device | str, n_sets: int = 2,
                     rounds: int = 8, calls: int = 3) -> dict[str, Timing]:
    """Time several versions of one computation against each other: series of ``calls`` calls of one
    ``fns[label](set_index)`` in a row, each label ``rounds`` series (rounded up, see
    :func:`balanced_series_order`), in an order where every label follows every other equally often.

    For A/B comparisons of a few percent. Separate series (``time_fn`` one after another) take in whatever
    the machine drifts by between them; a fixed order favours whichever version runs after the slowest one
    (on the H200, up to 5% at large layers, mok/cuda/ROUNDS.md "Round 8"), and so does an order in which one
    label follows another more often than the rest (round 31). No warm-up: call each function once before, the
    last label last. CUDA devices are timed with CUDA events per call, synchronised after each; others with a
    host clock.
    """
    device = torch.device(device)
    is_cuda = device.type == "cuda"
    labels = list(fns)
    times: dict[str, list[float]] = {label: [] for label in labels}
    for label in balanced_series_order(labels, rounds):
        for call in range(calls):
            if is_cuda:
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fns[label](call % n_sets)
                stop.record()
                stop.synchronize()
                times[label].append(start.elapsed_time(stop))
            else:
                began = time.perf_counter()
                fns[label](call % n_sets)
                times[label].append((time.perf_counter() - began) * 1e3)
    method = "cuda-events" if is_cuda else "host-clock"
    return {label: summarize(values, method) for label, values in times.items()}


def time_rotated(fns: dict[str, Callable[[int], Any]], *, device: torch.device | str, n_sets: int = 1,
                 warmup: int = 5, rounds: int = 5, calls: int = 4) -> dict[str, Timing]:
    """Time several backends' versions of one layer call side by side, for same-run ratios.

    After ``warmup`` calls of each (in the labels' order), series of ``calls`` calls of one label back to back as
    :func:`time_fn` times them (CUDA events around each call and no synchronisation inside the series, so the host
    can run ahead of the GPU), each label ``rounds`` series (rounded up to a multiple of the other labels' count),
    in an order where every label runs after every other label equally often and never after itself
    (:func:`balanced_series_order`). Each label's median is then over calls that alternated in time with the other
    labels' and followed each of them alike, so neither the machine's drift (an H200 at its 700 W limit moves its
    SM clock within seconds: round 16's A/B clock logs show medians of 1,395-1,980 MHz by shape and minima down to
    1,080 MHz) nor the slowdown a neighbour leaves behind (round 31: a series after a power-hungry backend runs up to
    10% slower) favours a label. :func:`time_fn`'s series one after another took in whatever the machine drifted
    by between them (mok/cuda/ROUNDS.md, round 16: 5% at anchor-2 from call to call). :func:`time_interleaved`
    synchronises after every call instead, for kernels alone.
    """
    device = torch.device(device)
    is_cuda = device.type == "cuda"
    n_sets = max(1, n_sets)
    labels = list(fns)
    for label in labels:
        for w in range(warmup):
            fns[label](w % n_sets)
    if is_cuda:
        torch.cuda.synchronize(device)
    times: dict[str, list[float]] = {label: [] for label in labels}
    backward: dict[str, list[float] | None] = {label: [] for label in labels}
    for label in balanced_series_order(labels, rounds, previous=labels[-1]):
        series, marked = _series_ms(fns[label], device, calls, n_sets)
        times[label] += series
        backward[label] = None if marked is None or backward[label] is None else backward[label] + marked
    method = ("cuda-events" if is_cuda else "host-clock") + ", rotated across backends (balanced)"
    return {label: summarize(values, method, backward[label]) for label, values in times.items()}


def free_memory(device: torch.device) -> None:
    """Drop unreachable tensors and, on a GPU, return cached blocks, so the next problem starts from a clean pool."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


# ----------------------------------------------------------------------------------------------------------
# Metadata
# ----------------------------------------------------------------------------------------------------------
def repo_root() -> Path:
    """The checkout that holds this package (two levels above ``mok/bench``)."""
    return Path(__file__).resolve().parents[2]


def _git_commit(root: Path) -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the checkout, or ``(None, None)`` where git or ``.git`` is absent (the GPU
    machine gets a copy of the tree without history: pass ``MOK_GIT_COMMIT`` there)."""
    env_commit = os.environ.get("MOK_GIT_COMMIT")
    if env_commit:
        return env_commit, None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip() or None
        if commit is None:
            return None, None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                                capture_output=True, text=True, timeout=10).stdout
        return commit, bool(status.strip())
    except (OSError, subprocess.SubprocessError):
        return None, None


SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".cpp", ".h")  # the Python package and the CUDA sources it JIT-builds


def source_digest(root: Path | None = None) -> str:
    """SHA-1 over the package's sources, Python and CUDA (the megakernel's ``.cu``/``.cuh``/``.cpp``): identifies
    the code that ran even without git (a digest over ``.py`` alone read the same for two kernels)."""
    root = root or repo_root()
    digest = hashlib.sha1()
    for path in sorted(p for p in (root / "mok").rglob("*") if p.suffix in SOURCE_SUFFIXES and p.is_file()):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def collect_metadata(device: torch.device | str | None = None) -> dict[str, Any]:
    """Where and with what a result was measured: date, GPU name and SM count, versions, commit."""
    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    meta: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "device_type": device.type,
        "gpu": None,
        "sm_count": None,
        "compute_capability": None,
        "gpu_memory_gib": None,
        "cuda": torch.version.cuda,
        "torch": torch.__version__,
        "triton": None,
        "python": platform.python_version(),
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET") == "1",
    }
    try:
        import triton
        meta["triton"] = triton.__version__
    except ImportError:
        pass
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        meta.update(gpu=props.name, sm_count=props.multi_processor_count,
                    compute_capability=f"{props.major}.{props.minor}",
                    gpu_memory_gib=round(props.total_memory / 2**30, 1))
    root = repo_root()
    meta["git_commit"], meta["git_dirty"] = _git_commit(root)
    meta["source_digest"] = source_digest(root) if (root / "mok").is_dir() else None
    return meta


# ----------------------------------------------------------------------------------------------------------
# Records and writers
# ----------------------------------------------------------------------------------------------------------
def shape_fields(shape: MoEShape) -> dict[str, Any]:
    """A shape as flat JSON fields."""
    return {"shape": shape.name, "tokens": shape.tokens, "hidden": shape.hidden,
            "intermediate": shape.intermediate, "experts": shape.num_experts, "top_k": shape.top_k}


def make_record(shape: MoEShape, backend: str, precision: str, pass_: str, timing: Timing | None, *,
                error: str | None = None, note: str | None = None) -> dict[str, Any]:
    """One (shape, backend, precision, pass) result with its FLOPs, bytes and rates (no ratios yet)."""
    flops = layer_flops(shape, pass_)
    nbytes = layer_bytes(shape, pass_, precision)
    rec: dict[str, Any] = {**shape_fields(shape), "backend": backend, "precision": precision, "pass": pass_,
                           "flops": flops, "bytes": nbytes, "ms": None, "ms_p10": None, "ms_p90": None,
                           "iters": None, "tflops": None, "gbps": None, "ratios": {}, "error": error,
                           "note": note}
    if timing is not None and timing.median_ms > 0:
        rec.update(ms=timing.median_ms, ms_p10=timing.p10_ms, ms_p90=timing.p90_ms, iters=timing.iters,
                   tflops=tflops(flops, timing.median_ms), gbps=gbps(nbytes, timing.median_ms))
    return rec


def add_ratios(records: list[dict[str, Any]], baselines: Iterable[str] = BASELINES) -> None:
    """Fill ``ratios[baseline] = baseline_ms / ms`` (a speed-up; > 1 is faster) for the same shape and pass.

    The baseline at the same precision is used; where it has none (the baselines run bf16 only), its bf16
    result is (so an MXFP8 row reads as its speed-up over the BF16 baselines, as MoK reports MXFP8)."""
    by_key = {(r["shape"], r["precision"], r["pass"], r["backend"]): r for r in records if r["ms"]}
    for rec in records:
        rec["ratios"] = {}
        if not rec["ms"]:
            continue
        for base in baselines:
            other = (by_key.get((rec["shape"], rec["precision"], rec["pass"], base))
                     or by_key.get((rec["shape"], "bf16", rec["pass"], base)))
            if other is not None:
                rec["ratios"][base] = other["ms"] / rec["ms"]


def geomean_summary(records: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{backend: {"<precision>/<pass>": {"tflops": g, "vs_<baseline>": g, "shapes": n}}}`` (geometric means)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for rec in records:
        if rec["ms"]:
            groups.setdefault((rec["backend"], rec["precision"], rec["pass"]), []).append(rec)
    for (backend, precision, pass_), recs in sorted(groups.items()):
        entry: dict[str, Any] = {"tflops": geomean(r["tflops"] for r in recs), "shapes": len(recs)}
        for base in sorted({b for r in recs for b in r["ratios"]} - {backend}):
            entry[f"vs_{base}"] = geomean(r["ratios"].get(base) for r in recs)
        out.setdefault(backend, {})[f"{precision}/{pass_}"] = entry
    return out


def format_line(rec: dict[str, Any]) -> str:
    """One printed line per result: time, TFLOP/s, GB/s and the ratio to each baseline."""
    head = f"{rec['shape']:<22} {rec['precision']:<5} {rec['backend']:<9} {rec['pass']:<3}"
    if rec.get("error"):
        return f"{head}  ERROR: {rec['error']}"
    if not rec.get("ms"):
        return f"{head}  n/a ({rec.get('note') or 'not timed'})"
    ratios = "  ".join(f"{v:5.2f}x {k}" for k, v in sorted(rec["ratios"].items()) if k != rec["backend"])
    note = f"  ({rec['note']})" if rec.get("note") else ""
    direct = f"  [direct {rec['direct_ms']:.4f} ms, {rec['direct_tflops']:.1f} TFLOP/s]" if rec.get("direct_ms") else ""
    return (f"{head} {rec['ms']:10.4f} ms {rec['tflops']:8.1f} TFLOP/s {rec['gbps']:8.1f} GB/s  {ratios}"
            f"{direct}{note}").rstrip()


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def markdown_report(doc: dict[str, Any]) -> str:
    """The markdown table of a result document (see :func:`result_document`)."""
    meta, settings, records = doc["metadata"], doc["settings"], doc["results"]
    lines = [f"# mok benchmark: {meta.get('gpu') or meta.get('device_type')}", ""]
    commit = meta.get("git_commit") or "unknown"
    if meta.get("git_dirty"):
        commit += " (uncommitted changes)"
    lines += [f"- date: {meta['date']}", f"- device: {meta.get('gpu') or meta['device_type']}"
              f" ({meta.get('sm_count') or '-'} SMs, compute capability {meta.get('compute_capability') or '-'})",
              f"- torch {meta['torch']}, triton {meta.get('triton') or '-'}, CUDA {meta.get('cuda') or '-'}",
              f"- commit: {commit}; source digest {meta.get('source_digest') or '-'}",
              f"- timing: {settings.get('timing', '')}", f"- router: {settings.get('router_note', '')}",
              "- FLOPs: 6*T*K*H*I forward, twice that backward (router excluded); bytes: fewest the layer must "
              "move (x, weights, out, routing; backward adds dO, dx, dW, d router weights)", ""]
    baselines = sorted({b for r in records for b in r["ratios"]})
    header = ["shape", "T,H,I,E,K", "prec", "backend"]
    for pass_ in PASSES:
        header += [f"{pass_} ms", f"{pass_} TFLOP/s", f"{pass_} GB/s"] + [f"{pass_} vs {b}" for b in baselines]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    rows: dict[tuple, dict[str, dict[str, Any]]] = {}
    for rec in records:
        key = (rec["shape"], f"{rec['tokens']},{rec['hidden']},{rec['intermediate']},{rec['experts']},"
               f"{rec['top_k']}", rec["precision"], rec["backend"])
        rows.setdefault(key, {})[rec["pass"]] = rec
    for key, by_pass in rows.items():
        cells = list(key)
        for pass_ in PASSES:
            rec = by_pass.get(pass_)
            if rec is None:
                cells += ["-"] * (3 + len(baselines))
            elif rec.get("error"):
                cells += ["error: " + rec["error"][:60].replace("|", "/")] + ["-"] * (2 + len(baselines))
            else:
                direct = f" (direct {rec['direct_ms']:.3f})" if rec.get("direct_ms") else ""
                cells += [_fmt(rec["ms"], ".3f") + direct, _fmt(rec["tflops"], ".1f"), _fmt(rec["gbps"], ".0f")]
                cells += [_fmt(rec["ratios"].get(b), ".2f") for b in baselines]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Geometric means over shapes", ""]
    lines += ["| backend | precision/pass | shapes | TFLOP/s | " + " | ".join(f"vs {b}" for b in baselines) + " |",
              "|" + "---|" * (4 + len(baselines))]
    for backend, entries in doc["geomean"].items():
        for key, entry in entries.items():
            lines.append(f"| {backend} | {key} | {entry['shapes']} | {_fmt(entry['tflops'], '.1f')} | "
                         + " | ".join(_fmt(entry.get(f"vs_{b}"), ".2f") for b in baselines) + " |")
    if any(r.get("direct_ms") for r in records):
        lines += ["", "bwd ms (direct ...): the median of each fwd+bwd call's time from its backward's start to its "
                  "end (harness.mark_backward_start), beside median(fwd+bwd) - median(fwd)."]
    notes = [r for r in records if r.get("note")]
    if notes:
        lines += ["", "Notes: " + "; ".join(sorted({f"{r['backend']}: {r['note']}" for r in notes}))]
    return "\n".join(lines) + "\n"


def result_document(records: list[dict[str, Any]], metadata: dict[str, Any], settings: dict[str, Any]) -> dict:
    """The JSON document: schema tag, metadata, settings, per-result records (with ratios) and geometric means."""
    add_ratios(records)
    return {"schema": SCHEMA, "metadata": metadata, "settings": settings, "results": records,
            "geomean": geomean_summary(records)}


def write_json(doc: dict[str, Any], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n")
    tmp.replace(path)  # atomic: a reader never sees half a file, even if the run is killed mid-write
    return path


def write_markdown(doc: dict[str, Any], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown_report(doc))
    return path


def write_png(doc: dict[str, Any], path: Path) -> Path | None:
    """Bar charts of TFLOP/s per shape and backend, one panel per pass; ``None`` without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    records = [r for r in doc["results"] if r["ms"]]
    if not records:
        return None
    passes = [p for p in PASSES if any(r["pass"] == p for r in records)]
    fig, axes = plt.subplots(len(passes), 1, figsize=(max(8, 1.4 * len({r['shape'] for r in records}) + 4),
                                                      3.6 * len(passes)), squeeze=False)
    for ax, pass_ in zip(axes[:, 0], passes):
        recs = [r for r in records if r["pass"] == pass_]
        shapes = list(dict.fromkeys(f"{r['shape']}\n{r['precision']}" for r in recs))
        backends = list(dict.fromkeys(r["backend"] for r in recs))
        width = 0.8 / max(1, len(backends))
        direct_xs, direct_ys = [], []
        for b_idx, backend in enumerate(backends):
            xs, ys = [], []
            for s_idx, label in enumerate(shapes):
                for r in recs:
                    if r["backend"] == backend and f"{r['shape']}\n{r['precision']}" == label:
                        xs.append(s_idx + (b_idx - (len(backends) - 1) / 2) * width)
                        ys.append(r["tflops"])
                        if r.get("direct_tflops"):
                            direct_xs.append(xs[-1])
                            direct_ys.append(r["direct_tflops"])
            ax.bar(xs, ys, width=width, label=backend)
        if direct_ys:  # the backward timed from its own start inside each step (mark_backward_start)
            ax.scatter(direct_xs, direct_ys, marker="_", s=max(40.0, 400 * width), color="black", zorder=3,
                       label="direct")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels(shapes, fontsize=7)
        ax.set_ylabel(f"{pass_} TFLOP/s")
        ax.legend(fontsize=7, ncol=len(backends) + 1)
        ax.grid(axis="y", alpha=0.3)
    meta = doc["metadata"]
    fig.suptitle(f"mok bench on {meta.get('gpu') or meta['device_type']}, {meta['date'][:10]}, "
                 f"commit {(meta.get('git_commit') or 'unknown')[:10]}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def output_dirs(out: str | os.PathLike | None) -> list[Path]:
    """Where results go: ``out`` (default ``experiments/results``), plus ``$OUT/results`` on the GPU machine."""
    dirs = [Path(out) if out else repo_root() / "experiments" / "results"]
    if os.environ.get("OUT"):
        extra = Path(os.environ["OUT"]) / "results"
        if extra.resolve() != dirs[0].resolve():
            dirs.append(extra)
    return dirs
