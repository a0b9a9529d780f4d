"""EXPERIMENT: where the benchmark's forward spends the time that the megakernel alone does not (torch.profiler).

``python -m mok.bench`` times the layer as training calls it: the router (``x @ W_r^T``, :func:`mok.route`), then
:func:`mok.moe` with autograd on. At anchor-2 that took 9.46 ms against 8.23 ms for the kernel alone
(``ab_kernels.py``), and the 1.2 ms had not been split. This script runs the bench's own call
(:class:`mok.bench.problems.LayerProblem`) and prints, per backend and shape:

1. bench-style times (CUDA events, rotating input sets, median) of the call three ways: as the bench runs it, under
   ``torch.no_grad()`` (nothing saved for a backward), and without the router;
2. one profiled series of back-to-back calls: the GPU time of each kernel per call, the GPU's busy and idle time per
   call, and the longest idle gaps with the kernels on either side (a gap is the GPU waiting for the host);
3. with ``--sync-debug``: every host synchronisation of one call, with the mok lines that caused it.

``sonicmoe`` is a backend name too (round 32): SonicMoE's whole layer (:class:`mok.bench.baselines.SonicLayer`,
its own router inside), profiled the same way, so its kernels can be set beside the megakernel's. ``--json``
keeps every backend's times and kernel table; :func:`records_from_log` reads them back from a printed log.

Run on the H200 from the repository root::

    python3 experiments/profile_forward.py anchor-2 kimi-k2.7/ep64 [--backends cuda,torch,sonicmoe] [--sync-debug]
        [--json results.json]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def merged_busy(intervals: list[tuple[float, float, str]]) -> tuple[float, list[tuple[float, str, str]]]:
    """GPU busy time of possibly overlapping ``(start, end, name)`` intervals (any unit), and the idle gaps between
    them as ``(length, name before, name after)``, longest first."""
    busy, gaps = 0.0, []
    ordered = sorted(intervals)
    if not ordered:
        return 0.0, []
    cur_start, cur_end, cur_name = ordered[0]
    for start, end, name in ordered[1:]:
        if start > cur_end:
            busy += cur_end - cur_start
            gaps.append((start - cur_end, cur_name, name))
            cur_start, cur_end, cur_name = start, end, name
        elif end > cur_end:
            cur_end, cur_name = end, name
    busy += cur_end - cur_start
    return busy, sorted(gaps, reverse=True)


def kernel_table(intervals: list[tuple[float, float, str]], calls: int) -> list[dict]:
    """Per kernel name, its GPU time per call (the unit of ``intervals``) and launches per call, most time first."""
    per_name: dict[str, list[float]] = {}
    for start, end, name in intervals:
        per_name.setdefault(name, []).append(end - start)
    rows = [{"name": name, "time_per_call": sum(durations) / calls, "launches_per_call": len(durations) / calls}
            for name, durations in per_name.items()]
    return sorted(rows, key=lambda row: -row["time_per_call"])


# The layer's pieces, by kernel name (first match wins; round 32's profiles of the megakernel and SonicMoE 0.1.2):
# every other kernel is the router and the routing. The megakernel is one kernel: :func:`layer_pieces` splits it by
# its task timeline instead.
KERNEL_PIECES = (("gate/up GEMM", ("GemmGated",)), ("down GEMM", ("GemmDefault",)),
                 ("weighted sum", ("token_gather_sum", "sm90_moe_sum_kernel")),  # SonicMoE's; mok's since round 34
                 ("megakernel", ("sm90_moe_forward_kernel",)))
TIMELINE_PIECES = {"dispatch": "dispatch", "gate_up": "gate/up GEMM", "down": "down GEMM", "combine": "weighted sum"}
IDLE_PIECE = "megakernel head and tail"  # its CTAs' time before their first task and after their last
OTHER_PIECE = "router and routing"


def layer_pieces(kernels: list[dict], timeline_kinds: dict | None = None) -> dict[str, float]:
    """GPU time per forward of each piece of a layer (the unit of ``kernels``' ``time_per_call``, a
    :func:`kernel_table`), in :data:`KERNEL_PIECES`' order, then the router and routing. With ``timeline_kinds``
    (a task timeline's ``summary["kinds"]``, experiments/task_timeline.py) the megakernel's time is split by each
    kind's share of its CTAs' time, and what no task holds (CTAs before their first task and after their last) is
    its head and tail, so the pieces add up to the kernels' time."""
    pieces: dict[str, float] = {}
    for row in kernels:
        piece = next((name for name, marks in KERNEL_PIECES if any(m in row["name"] for m in marks)), OTHER_PIECE)
        pieces[piece] = pieces.get(piece, 0.0) + row["time_per_call"]
    mega = pieces.pop("megakernel", None)
    if mega is not None and timeline_kinds:
        for kind, info in timeline_kinds.items():
            piece = TIMELINE_PIECES[kind]
            pieces[piece] = pieces.get(piece, 0.0) + mega * info["share"]
        pieces[IDLE_PIECE] = mega * (1.0 - sum(info["share"] for info in timeline_kinds.values()))
    elif mega is not None:
        pieces["megakernel"] = mega
    order = [name for name, _ in KERNEL_PIECES] + ["dispatch", IDLE_PIECE, OTHER_PIECE]
    return {name: pieces[name] for name in sorted(pieces, key=order.index)}


_HEADER = re.compile(r"^(\S+) (\S+): (bench fwd .*)$")         # "anchor-3 cuda: bench fwd 5.509 ms (598.7 TFLOP/s), ..."
_TIME = re.compile(r"([a-z_ ()]+?) ([0-9.]+) ms \(")              # "no_grad 6.039 ms (" -> label, ms
_SPAN = re.compile(r"GPU span ([0-9.]+) ms per call, busy ([0-9.]+) ms")
_KERNEL_ROW = re.compile(r"^\s+([0-9.]+)\s+([0-9.]+)  (.+)$")     # "  5025.0   1.0  void mok::sm90::..."


def records_from_log(text: str) -> list[dict]:
    """The records of a run's printed log (for runs kept without ``--json``): per (shape, backend) its bench times
    (``times_ms``), span and busy time (us per call) and ``kernels_us`` as :func:`kernel_table` rows. The log prints
    each kernel table's first 14 rows with names cut at 100 characters, so the smallest kernels are missing; the
    names still carry :data:`KERNEL_PIECES`' marks."""
    records: list[dict] = []
    in_table = False
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            times = {label.strip(" ,"): float(ms) for label, ms in _TIME.findall(header.group(3))}
            records.append({"shape": header.group(1), "backend": header.group(2), "times_ms": times, "kernels_us": []})
            in_table = False
        elif not records:
            continue
        elif (span := _SPAN.search(line)) is not None:
            records[-1]["span_us"], records[-1]["busy_us"] = float(span.group(1)) * 1e3, float(span.group(2)) * 1e3
        elif line.strip().startswith("kernels by GPU time per call"):
            in_table = True
        elif in_table and (row := _KERNEL_ROW.match(line)) is not None:
            records[-1]["kernels_us"].append({"name": row.group(3), "time_per_call": float(row.group(1)),
                                              "launches_per_call": float(row.group(2))})
        else:
            in_table = False
    return records


def bench_times(fwd, device, n_sets: int, iters: int) -> dict[str, float]:
    """Median ms of a forward ``fwd(i)`` as the bench calls it, and of the same under no_grad."""
    import torch  # noqa: PLC0415 (main only: the CPU tests import this file)

    from mok.bench.harness import time_fn  # noqa: PLC0415

    def no_grad(i):
        with torch.no_grad():
            return fwd(i)

    times = {"bench fwd": time_fn(fwd, device=device, n_sets=n_sets, warmup=3, iters=iters),
             "no_grad": time_fn(no_grad, device=device, n_sets=n_sets, warmup=3, iters=iters)}
    return {label: timing.median_ms for label, timing in times.items()}


def profile_calls(fwd, n_sets: int, calls: int) -> dict:
    """Profiles ``calls`` back-to-back forwards ``fwd(i)``; prints kernels per call and the GPU's idle gaps, and
    returns them: span, busy time and each kernel's time per call, and the longest gaps (each one's own length), in
    us."""
    import torch  # noqa: PLC0415
    from torch.autograd import DeviceType  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    for i in range(3):
        fwd(i % n_sets)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], with_stack=True) as prof:
        outs = [fwd(i % n_sets) for i in range(calls)]
        torch.cuda.synchronize()
    del outs
    kernels = [e for e in prof.events()
               if e.device_type == DeviceType.CUDA and not getattr(e, "is_user_annotation", False)]
    intervals = [(e.time_range.start, e.time_range.end, e.name) for e in kernels]
    busy_us, gaps = merged_busy(intervals)
    span_us = max(end for _, end, _ in intervals) - min(start for start, _, _ in intervals)
    print(f"  profiled {calls} calls back to back: GPU span {span_us / calls / 1e3:.3f} ms per call, "
          f"busy {busy_us / calls / 1e3:.3f} ms, idle {(span_us - busy_us) / calls / 1e3:.3f} ms")
    table = kernel_table(intervals, calls)
    print("  kernels by GPU time per call (us, launches per call):")
    for row in table[:14]:
        print(f"    {row['time_per_call']:10.1f}  {row['launches_per_call']:4.1f}  {row['name'][:100]}")
    print("  longest idle gaps (us, kernel before -> kernel after):")
    for length, before, after in gaps[:6]:
        print(f"    {length:10.1f}  {before[:50]} -> {after[:50]}")
    # Which operators launched the GPU time (aten::sort, CudaMoE, ...), grouped by their innermost Python frames
    # where the profiler recorded them (torch 2.11 on the H200 printed the operators without a source column).
    print(prof.key_averages(group_by_stack_n=3).table(sort_by="self_device_time_total", row_limit=16,
                                                      max_name_column_width=40, max_src_column_width=90))
    return {"span_us": span_us / calls, "busy_us": busy_us / calls, "kernels_us": table,
            "gaps_us": [list(g) for g in gaps[:6]]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="+")
    parser.add_argument("--backends", default="cuda,torch")
    parser.add_argument("--iters", type=int, default=10, help="timed calls per bench-style series")
    parser.add_argument("--calls", type=int, default=4, help="calls in the profiled series")
    parser.add_argument("--sync-debug", action="store_true",
                        help="also list the host synchronisations of one bench forward, with where they came from")
    parser.add_argument("--json", type=Path, help="write every backend's times and kernel table here")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415

    from mok.bench.baselines import SONIC_NAME, SonicLayer  # noqa: PLC0415
    from mok.bench.harness import free_memory, layer_flops, tflops  # noqa: PLC0415
    from mok.bench.problems import LayerProblem  # noqa: PLC0415
    from mok.config import get_shape  # noqa: PLC0415
    from profile_backward import report_syncs  # noqa: PLC0415

    device = torch.device("cuda")
    records = []
    for name in args.shapes:
        shape = get_shape(name)
        flops = layer_flops(shape, "fwd")
        with_router = LayerProblem(shape, "bf16", device, router=True)
        without_router = LayerProblem(shape, "bf16", device, router=False)
        for backend in args.backends.split(","):
            if backend == SONIC_NAME:  # SonicMoE's layer routes itself: no "without the router" reading
                sonic = SonicLayer(shape, device)
                fwd, n_sets = sonic.forward, len(sonic.xs)
                times = bench_times(fwd, device, n_sets, args.iters)
            else:
                fwd, n_sets = with_router.calls(backend)["fwd"], len(with_router.xs)
                times = bench_times(fwd, device, n_sets, args.iters)
                times["no router (no_grad)"] = bench_times(without_router.calls(backend)["fwd"], device,
                                                           len(without_router.xs), args.iters)["no_grad"]
            print(f"{name} {backend}: " + ", ".join(f"{label} {ms:.3f} ms ({tflops(flops, ms):.1f} TFLOP/s)"
                                                    for label, ms in times.items()))
            profiled = profile_calls(fwd, n_sets, args.calls)
            records.append({"shape": name, "backend": backend, "times_ms": times, **profiled})
            if args.sync_debug and backend == SONIC_NAME:
                print(f"  {name} {backend}: --sync-debug lists mok's own synchronisations only; skipped")
            elif args.sync_debug:
                report_syncs(f"  {name} {backend}: one bench forward", lambda: fwd(1))
            if backend == SONIC_NAME:
                del sonic
            del fwd
            free_memory(device)
        del with_router, without_router
        free_memory(device)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "records": records}, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
