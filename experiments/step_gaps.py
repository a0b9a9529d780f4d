"""EXPERIMENT: where the GPU waits inside one training step: the kernels of one profiled forward + backward of the
bench's layer (router inside, input set 0), launched as the bench launches them (no synchronisation between the two
passes), read from the GPU's own timeline. Per pass: its span on the GPU, the time some kernel (or copy) ran, the
time none did, and the longest idle stretches with the kernels on either side (the wait for a pass's first launch
included).

Why: at anchor-5 the bench reads the `cuda` backward at 24.6 ms (``median(fwd+bwd) - median(fwd)``, round 30) while
the kernels of one profiled backward add up to 21.07 ms (round 27). ``profile_backward.py``'s "wall" starts from a
synchronised forward, so it also charges the host's time before the first launch; this does not.

    python3 experiments/step_gaps.py anchor-5 --backends cuda,triton,torch [--gaps 8] [--json out.json]
    python3 experiments/step_gaps.py 2048,1024,512,16,4          # a custom T,H,I,E,K shape

Needs a CUDA GPU (``gpu_busy`` and ``longest_gaps``, the timeline arithmetic, run anywhere).
"""
from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass

FORWARD, BACKWARD = "mok_step_forward", "mok_step_backward"  # the passes' record_function ranges


@dataclass(frozen=True)
class Kernel:
    """One GPU activity (kernel, copy or memset): name, start and end in microseconds."""
    name: str
    start: float
    end: float


@dataclass(frozen=True)
class Gap:
    """The GPU idle for ``length`` us from ``at`` on, between the end of ``before`` and the start of ``after``."""
    length: float
    at: float
    before: str
    after: str


def idle_stretches(kernels: list[Kernel], start: float, end: float) -> list[Gap]:
    """Every stretch of [start, end) in which none of ``kernels`` ran, in time order (overlapping kernels, e.g. on
    two streams, cover the time once). The stretch before the first kernel (the GPU waiting for the host's first
    launch) counts too: its ``before`` is "(start)", and the last one's ``after`` is "(end)" if nothing follows."""
    gaps, covered_to, last_name = [], start, "(start)"
    for k in sorted(kernels, key=lambda k: k.start):
        if k.start >= end:
            break
        if k.start > covered_to:
            gaps.append(Gap(k.start - covered_to, covered_to, last_name, k.name))
        if k.end > covered_to:
            covered_to, last_name = min(k.end, end), k.name
    if covered_to < end:
        gaps.append(Gap(end - covered_to, covered_to, last_name, "(end)"))
    return gaps


def gpu_busy(kernels: list[Kernel], start: float, end: float) -> float:
    """Microseconds of [start, end) in which at least one of ``kernels`` ran."""
    return end - start - sum(g.length for g in idle_stretches(kernels, start, end))


def longest_gaps(kernels: list[Kernel], count: int) -> list[Gap]:
    """The ``count`` longest stretches with no kernel running, between the first kernel's start and the last one's
    end, longest first."""
    if not kernels:
        return []
    gaps = idle_stretches(kernels, min(k.start for k in kernels), max(k.end for k in kernels))
    return sorted(gaps, key=lambda g: -g.length)[:count]


def pass_summary(kernels: list[Kernel], start: float, end: float, count: int) -> dict:
    """A pass's span [start, end) on the GPU: its kernels' busy and idle time and longest idle stretches (us), the
    wait for its first launch included."""
    inside = [k for k in kernels if start <= k.start < end]
    gaps = idle_stretches(inside, start, end)
    idle = sum(g.length for g in gaps)
    return {"span_us": end - start, "busy_us": end - start - idle, "idle_us": idle, "kernels": len(inside),
            "gaps": [asdict(g) for g in sorted(gaps, key=lambda g: -g.length)[:count]]}


def profile_step(problem, backend: str, warmup: int = 3):
    """(GPU activities, {pass name: (start, end)}) of one forward + backward of ``problem`` (a
    :class:`mok.bench.problems.LayerProblem`) on input set 0, after ``warmup`` steps."""
    import torch  # noqa: PLC0415
    from torch.autograd import DeviceType  # noqa: PLC0415
    from torch.profiler import ProfilerActivity, profile, record_function  # noqa: PLC0415

    for _ in range(warmup):
        problem.forward_backward(backend, 0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        with record_function(FORWARD):
            out = problem.forward(backend, 0)
        with record_function(BACKWARD):
            problem.backward(out, 0)
        torch.cuda.synchronize()
    kernels, ranges = [], {}
    for e in prof.events():
        if e.device_type != DeviceType.CUDA:
            continue
        if getattr(e, "is_user_annotation", False):  # a record_function range's span on the GPU
            if e.name in (FORWARD, BACKWARD):
                ranges[e.name] = (e.time_range.start, e.time_range.end)
            continue
        kernels.append(Kernel(e.name, e.time_range.start, e.time_range.end))
    return kernels, ranges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("shapes", nargs="+", help="presets or T,H,I,E,K")
    parser.add_argument("--backends", default="cuda,triton,torch")
    parser.add_argument("--gaps", type=int, default=6, help="longest gaps listed per pass")
    parser.add_argument("--json", default=None, help="also write every number to this file")
    args = parser.parse_args()

    import torch  # noqa: PLC0415

    from mok.bench.problems import LayerProblem  # noqa: PLC0415
    from mok.config import get_shape  # noqa: PLC0415

    results = []
    for spec in args.shapes:
        shape = get_shape(spec)
        problem = LayerProblem(shape, "bf16", torch.device("cuda"), n_sets=1, router=True)
        for backend in args.backends.split(","):
            kernels, ranges = profile_step(problem, backend)
            if not kernels:
                raise RuntimeError(f"{shape.name} {backend}: the profiler saw no GPU activity")
            first, last = min(k.start for k in kernels), max(k.end for k in kernels)
            # Without the ranges (a profiler that drops GPU annotations) the whole step is one pass.
            fwd = ranges.get(FORWARD, (first, last))
            bwd = ranges.get(BACKWARD, (fwd[1], last))
            row = {"shape": shape.name, "backend": backend,
                   "step": pass_summary(kernels, first, last, args.gaps),
                   "forward": pass_summary(kernels, fwd[0], bwd[0], args.gaps),
                   "backward": pass_summary(kernels, bwd[0], last, args.gaps)}
            results.append(row)
            for part in ("step", "forward", "backward"):
                r = row[part]
                print(f"{shape.name} {backend} {part}: span {r['span_us'] / 1e3:.3f} ms, GPU busy "
                      f"{r['busy_us'] / 1e3:.3f} ms, idle {r['idle_us'] / 1e3:.3f} ms, {r['kernels']} activities")
            for part in ("forward", "backward"):  # the forward's gaps are the host's launches (round 31)
                for g in row[part]["gaps"]:
                    print(f"    {part:8s} gap {g['length']:9.1f} us after {g['before'][:60]} before {g['after'][:60]}")
        del problem
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results}, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
