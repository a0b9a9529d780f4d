"""Where the time of ``backend="cuda"``'s forward goes, per shape (the anchors and the EP-64 slices).

For each shape (T, H, I, E, K), bf16, routing given (random logits -> ``mok.route``), this times:

====  =================  ============================================================================================
 (a)  ``layer``          ``mok.moe(..., backend="cuda")`` under ``torch.no_grad()``: what a user sees (default
                         settings: deferred error check, workspace reuse, fused top-1 combine)
 (b)  ``schedule``       the schedule tables alone (``mok.cuda.schedule_tables.build_kernel_schedule``, what the
                         backend runs: sort + two kernels): ``gpu`` = replayed from a CUDA graph (device time
                         only: its share of a layer whose host runs ahead), ``eager`` = plain calls (includes the
                         host's launch cost when the host is the slower side); ``foundation`` =
                         ``mok.build_schedule`` (PyTorch operations, with the inverse map), eager and
                         ``foundation_gpu`` from a graph
 (c)  ``prep``           everything else the backend does before the launch (``prepare`` with the tables given:
                         pointer tables, output allocation, workspace lookup), and ``launch_host``: the host time
                         to enqueue reset + kernel (TMA descriptors, checks)
 (d)  ``kernel``         the megakernel alone (reset + kernel), per variant and dispatch mode (``ring``: dispatch
                         tasks fill the ring; ``gather``: the gate/up producer copies rows itself); for top-1
                         shapes also unfused
 (e)  ``no_comm``        the megakernel with communication work removed (timing ablations, garbage results):
                         ``no_dispatch`` (dispatch copies nothing), ``no_combine`` (no weighted sum, no combine
                         waits, down rows stored contiguously instead of scattered), ``no_comm`` (both); in ring
                         mode, where dispatch is a task of its own; ``mainloop_only``: ``no_comm`` and the GEMM
                         epilogues neither compute nor store (the mainloops and task hand-offs alone)
 (f)  ``gemm_only``      the three expert GEMMs through ``torch._grouped_mm`` on rows already gathered (no
                         SwiGLU, no gather, no combine): the vendor-library price of the FLOPs
====  =================  ============================================================================================

Derived: ``not_hidden`` = (d) - (e) in ms and as a share of (d) (split into dispatch and combine); the
epilogue cost = ``no_comm`` - ``mainloop_only`` (what the SwiGLU / push epilogues add where nothing overlaps
them: each consumer warpgroup runs its epilogue between two mainloops); the schedule share = (b, gpu) / (a); the layer overhead = (a) - (d). Timing: CUDA events around each call, median
of ``--iters`` calls after warm-up, input sets rotated (tokens and routing; weights are far larger than L2).

Run on the H200 (after the extension is built, e.g. by the GPU tests, or it is built first)::

    python experiments/cuda_breakdown.py            # all nine shapes (15 s on 2026-11-29); JSON to $OUT if set
    python experiments/cuda_breakdown.py --shapes anchor-2,kimi-k2.7/ep64 --iters 20

Prints one compact table last; writes ``cuda_breakdown_<stamp>.json`` and a ``.png`` of the same name to ``$OUT``
(or ``--out DIR``). ``--from-json FILE`` redraws both from a saved JSON without a GPU.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch

import mok
from mok.bench.harness import time_fn, time_graph_ms
from mok.config import ANCHOR_SHAPES, EP64_SLICES, MoEShape, get_shape

SHAPES = {s.name: s for s in [*ANCHOR_SHAPES, *EP64_SLICES]}
VARIANTS = ("simple", "pipelined")
DISPATCH_MODES = ("ring", "gather")


# ----------------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------------

def time_events(fn, n_sets: int, iters: int, warmup: int = 2) -> float:
    """Median milliseconds of ``fn(i)`` between CUDA events, calls back to back, input set ``i % n_sets``."""
    return time_fn(fn, device="cuda", n_sets=n_sets, warmup=warmup, iters=iters).median_ms


def time_host(fn, n_sets: int, iters: int) -> float:
    """Mean host milliseconds to issue ``fn(i)`` (no synchronisation inside the loop)."""
    torch.cuda.synchronize()
    start = time.perf_counter()
    for it in range(iters):
        fn(it % n_sets)
    elapsed = time.perf_counter() - start
    torch.cuda.synchronize()
    return elapsed * 1e3 / iters


def time_graph(fn, iters: int) -> float:
    """Median milliseconds of ``fn()`` replayed from a CUDA graph (device time only); NaN if it cannot be captured."""
    try:
        return time_graph_ms(fn, iters)
    except Exception as err:  # noqa: BLE001 -- a capture failure is a result to report, not a crash
        print(f"  (graph capture failed: {type(err).__name__}: {str(err).splitlines()[0][:100]})")
        return float("nan")


# ----------------------------------------------------------------------------------------------------------
# One shape
# ----------------------------------------------------------------------------------------------------------

class Problem:
    """Random bf16 inputs of one shape: ``n_sets`` token/routing sets, one weight set."""

    def __init__(self, shape: MoEShape, n_sets: int, seed: int = 0) -> None:
        gen = torch.Generator(device="cuda").manual_seed(seed)
        t, h, i, e, k = shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k
        self.shape = shape
        self.xs = [torch.randn(t, h, generator=gen, device="cuda").to(torch.bfloat16) for _ in range(n_sets)]
        self.routes = [mok.route(torch.randn(t, e, generator=gen, device="cuda"), k, check_inputs=False)
                       for _ in range(n_sets)]
        self.w_gate = (torch.randn(e, i, h, generator=gen, device="cuda") * h ** -0.5).to(torch.bfloat16)
        self.w_up = (torch.randn(e, i, h, generator=gen, device="cuda") * h ** -0.5).to(torch.bfloat16)
        self.w_down = (torch.randn(e, h, i, generator=gen, device="cuda") * i ** -0.5).to(torch.bfloat16)

    def args(self, j: int):
        weights, ids = self.routes[j]
        return self.xs[j], ids, weights, self.w_gate, self.w_up, self.w_down

    def prepare(self, j: int, **options):
        """The megakernel's launch of set ``j`` (:func:`mok.cuda.backend.prepare` on the device-built schedule tables;
        ``options`` go to prepare, e.g. ``early_combine=True``)."""
        from mok.cuda import backend
        from mok.cuda.schedule_tables import build_kernel_schedule

        schedule = build_kernel_schedule(self.routes[j][1], self.shape.num_experts)
        return backend.prepare(*self.args(j), schedule=schedule, **options)


def gemm_only_ms(p: Problem, iters: int) -> float:
    """Gate, up and down GEMMs through torch._grouped_mm on pre-gathered rows (NaN where unavailable)."""
    if not hasattr(torch, "_grouped_mm"):
        return float("nan")
    s = p.shape
    rows = s.tokens * s.top_k
    n_sets = 1 if rows * s.hidden * 2 > 2 ** 30 else len(p.xs)
    gathered, offsets = [], []
    for j in range(n_sets):
        weights, ids = p.routes[j]
        order = torch.argsort(ids.reshape(-1), stable=True)
        gathered.append(p.xs[j][order // s.top_k])
        offsets.append(torch.bincount(ids.reshape(-1), minlength=s.num_experts).cumsum(0).to(torch.int32))
    h = torch.randn(rows, s.intermediate, device="cuda").to(torch.bfloat16)
    wg, wu, wd = (w.transpose(-2, -1) for w in (p.w_gate, p.w_up, p.w_down))

    def gemms(j: int) -> None:
        torch._grouped_mm(gathered[j], wg, offs=offsets[j])
        torch._grouped_mm(gathered[j], wu, offs=offsets[j])
        torch._grouped_mm(h, wd, offs=offsets[j])

    try:
        return time_events(gemms, n_sets, iters)
    except RuntimeError as err:
        print(f"  (grouped_mm failed: {str(err).splitlines()[0][:100]})")
        return float("nan")


def measure_shape(shape: MoEShape, iters: int, n_sets: int, deadline: float) -> dict:
    """Every measurement of one shape (milliseconds), skipping the optional ones past ``deadline``."""
    from mok.cuda import backend
    from mok.cuda.schedule_tables import build_kernel_schedule
    from mok.cuda.workspace import release_workspaces

    p = Problem(shape, n_sets)
    r: dict = {"shape": shape.name, "T": shape.tokens, "H": shape.hidden, "I": shape.intermediate,
               "E": shape.num_experts, "K": shape.top_k, "gflop": shape.forward_flops / 1e9}
    small_iters = max(iters, 20)

    # (a) the layer as a user calls it
    def layer(j):
        with torch.no_grad():
            return mok.moe(*p.args(j), backend="cuda", check_inputs=False)
    r["layer_ms"] = time_events(layer, n_sets, iters)
    r["layer_host_ms"] = time_host(layer, n_sets, iters)
    backend.check_pending_errors()

    # (b) the schedule tables
    ids = [route[1] for route in p.routes]
    r["schedule_eager_ms"] = time_events(lambda j: build_kernel_schedule(ids[j], shape.num_experts), n_sets,
                                         small_iters)
    r["schedule_host_ms"] = time_host(lambda j: build_kernel_schedule(ids[j], shape.num_experts), n_sets,
                                      small_iters)
    r["schedule_gpu_ms"] = time_graph(lambda: build_kernel_schedule(ids[0], shape.num_experts), small_iters)
    r["schedule_foundation_ms"] = time_events(lambda j: mok.build_schedule(ids[j], shape.num_experts), n_sets,
                                              small_iters)
    r["schedule_foundation_gpu_ms"] = time_graph(lambda: mok.build_schedule(ids[0], shape.num_experts), small_iters)

    # (c) the rest of the preparation, and the host cost of the launch call
    tables = [build_kernel_schedule(i, shape.num_experts) for i in ids]
    prepare = lambda j: backend.prepare(*p.args(j), schedule=tables[j], reuse_workspace=True)  # noqa: E731
    r["prep_ms"] = time_events(prepare, n_sets, small_iters)
    r["prep_host_ms"] = time_host(prepare, n_sets, small_iters)
    preps = [prepare(j) for j in range(n_sets)]
    r["launch_host_ms"] = time_host(lambda j: backend.launch(preps[j]), n_sets, iters)
    backend.check_error(preps[0])

    # (d) the kernel alone, (e) with communication removed
    fused = preps[0].fuse_top1
    r["fused_top1"] = fused
    r["default_variant"] = backend.default_variant()
    r["default_dispatch"] = backend.resolve_dispatch(None, shape.intermediate)  # "auto" resolved for this shape
    r["gather_prefetch"] = backend.default_gather_prefetch()
    ablations = {"no_dispatch": backend.ABLATE["dispatch"],
                 "no_combine": backend.ABLATE["combine"] | backend.ABLATE["push"],
                 "no_comm": backend.ABLATE_COMM,
                 "mainloop_only": backend.ABLATE_COMM | backend.ABLATE["epilogue"]}
    for variant in VARIANTS:
        for mode in DISPATCH_MODES:
            r[f"kernel_{variant}_{mode}_ms"] = time_events(
                lambda j: backend.launch(preps[j], variant=variant, dispatch=mode), n_sets, iters)
            backend.check_error(preps[0])
        r[f"kernel_{variant}_ms"] = r[f"kernel_{variant}_{r['default_dispatch']}_ms"]
        for name, flags in ablations.items():
            if time.monotonic() > deadline:
                break
            r[f"{name}_{variant}_ms"] = time_events(
                lambda j: backend.launch(preps[j], variant=variant, ablate=flags, dispatch="ring"), n_sets, iters)
            backend.check_error(preps[0])
    if fused and time.monotonic() < deadline:
        unfused = [backend.prepare(*p.args(j), schedule=tables[j], fuse_top1=False, reuse_workspace=True)
                   for j in range(n_sets)]
        for variant in VARIANTS:
            r[f"kernel_{variant}_unfused_ms"] = time_events(lambda j: backend.launch(unfused[j], variant=variant),
                                                            n_sets, iters)  # default dispatch mode
        backend.check_error(unfused[0])
        del unfused

    # (f) the GEMMs alone
    if time.monotonic() < deadline:
        r["gemm_only_ms"] = gemm_only_ms(p, iters)

    del preps, tables, p
    release_workspaces()
    torch.cuda.empty_cache()
    return r


# ----------------------------------------------------------------------------------------------------------
# Derived numbers and the table
# ----------------------------------------------------------------------------------------------------------

def derive(r: dict) -> dict:
    """Adds TFLOP/s, not-hidden communication and shares to one shape's measurements (in place)."""
    nan = float("nan")
    variant = r.get("default_variant", "simple")
    tflops = lambda ms: r["gflop"] / ms if ms and ms == ms else nan  # noqa: E731 (GFLOP / ms = TFLOP/s)
    kernel = r.get(f"kernel_{variant}_ms", nan)
    r["layer_tflops"] = tflops(r.get("layer_ms"))
    for v in VARIANTS:
        r[f"kernel_{v}_tflops"] = tflops(r.get(f"kernel_{v}_ms", nan))
        for mode in DISPATCH_MODES:
            r[f"kernel_{v}_{mode}_tflops"] = tflops(r.get(f"kernel_{v}_{mode}_ms", nan))
        k = r.get(f"kernel_{v}_ring_ms", nan)  # the ablations run in ring mode
        for part, key in (("total", "no_comm"), ("dispatch", "no_dispatch"), ("combine", "no_combine")):
            ablated = r.get(f"{key}_{v}_ms", nan)
            r[f"not_hidden_{part}_{v}_ms"] = k - ablated
            r[f"not_hidden_{part}_{v}_pct"] = 100 * (k - ablated) / k if k == k and k else nan
        mainloop = r.get(f"mainloop_only_{v}_ms", nan)
        r[f"epilogue_{v}_ms"] = r.get(f"no_comm_{v}_ms", nan) - mainloop
        r[f"epilogue_{v}_pct"] = 100 * r[f"epilogue_{v}_ms"] / k if k == k and k else nan
        r[f"mainloop_only_{v}_tflops"] = tflops(mainloop)
    r["gemm_only_tflops"] = tflops(r.get("gemm_only_ms", nan))
    r["schedule_share_pct"] = 100 * r.get("schedule_gpu_ms", nan) / r["layer_ms"]
    r["schedule_share_eager_pct"] = 100 * r.get("schedule_eager_ms", nan) / r["layer_ms"]
    r["layer_overhead_ms"] = r["layer_ms"] - kernel
    return r


def fmt(value, digits: int = 2) -> str:
    if value is None or value != value:
        return "-"
    return f"{value:.{digits}f}"


def table(rows: list[dict]) -> str:
    """The compact per-shape table (default variant for the not-hidden split, which is measured in ring mode)."""
    head = ("| shape | layer ms (TF/s) | kernel simple / pipelined ms (TF/s), default dispatch | kernel ring / gather "
            "ms (TF/s), default variant | no-comm ms (ring) | mainloop-only ms (TF/s) | epilogue ms (% ring kernel) | not hidden ms (% ring kernel): "
            "total / dispatch / combine | GEMM-only ms (TF/s) | schedule gpu / eager / foundation gpu / foundation "
            "eager ms | schedule share % | prep + launch-host ms | layer - kernel ms |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        v = r.get("default_variant", "simple")
        nh = " / ".join(f"{fmt(r.get(f'not_hidden_{part}_{v}_ms'))} ({fmt(r.get(f'not_hidden_{part}_{v}_pct'), 0)}%)"
                        for part in ("total", "dispatch", "combine"))
        kern = " / ".join(f"{fmt(r.get(f'kernel_{x}_ms'), 3)} ({fmt(r.get(f'kernel_{x}_tflops'), 0)})"
                          for x in VARIANTS)
        if r.get("fused_top1"):
            kern += " [unfused " + " / ".join(fmt(r.get(f"kernel_{x}_unfused_ms"), 3) for x in VARIANTS) + "]"
        modes = " / ".join(f"{fmt(r.get(f'kernel_{v}_{m}_ms'), 3)} ({fmt(r.get(f'kernel_{v}_{m}_tflops'), 0)})"
                           for m in DISPATCH_MODES)
        lines.append(
            f"| {r['shape']} | {fmt(r.get('layer_ms'), 3)} ({fmt(r.get('layer_tflops'), 0)}) | {kern} | {modes} | "
            f"{fmt(r.get(f'no_comm_{v}_ms'), 3)} | {fmt(r.get(f'mainloop_only_{v}_ms'), 3)} "
            f"({fmt(r.get(f'mainloop_only_{v}_tflops'), 0)}) | {fmt(r.get(f'epilogue_{v}_ms'), 3)} "
            f"({fmt(r.get(f'epilogue_{v}_pct'), 0)}%) | {nh} | {fmt(r.get('gemm_only_ms'), 3)} "
            f"({fmt(r.get('gemm_only_tflops'), 0)}) | {fmt(r.get('schedule_gpu_ms'), 3)} / "
            f"{fmt(r.get('schedule_eager_ms'), 3)} / {fmt(r.get('schedule_foundation_gpu_ms'), 3)} / "
            f"{fmt(r.get('schedule_foundation_ms'), 3)} | "
            f"{fmt(r.get('schedule_share_pct'), 1)} | {fmt(r.get('prep_ms'), 3)} + {fmt(r.get('launch_host_ms'), 3)} | "
            f"{fmt(r.get('layer_overhead_ms'), 3)} |")
    return "\n".join(lines)


def plot(rows: list[dict], meta: dict, path: Path) -> Path | None:
    """Two panels per shape: the kernel's TFLOP/s in each (variant, dispatch mode) next to ``torch._grouped_mm``
    on pre-gathered rows, and where the default kernel's time goes (GEMM tasks, dispatch and combine not hidden,
    in ring mode). Returns the PNG path, or ``None`` without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    nan = float("nan")
    names = [r["shape"] for r in rows]
    x = list(range(len(rows)))
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 4.8))
    series = [(f"{v} / {m}", f"kernel_{v}_{m}_tflops") for v in VARIANTS for m in DISPATCH_MODES]
    series.append(("torch._grouped_mm, GEMMs only", "gemm_only_tflops"))
    width = 0.8 / len(series)
    for k, (label, key) in enumerate(series):
        left.bar([i + (k - (len(series) - 1) / 2) * width for i in x], [r.get(key, nan) for r in rows], width,
                 label=label)
    left.set_title("megakernel alone: variant / dispatch mode")
    left.set_ylabel("TFLOP/s (6 T K H I / time)")
    # Ring-mode split of the default variant's kernel time: the kernel with all communication ablated, and the
    # rest. (The dispatch / combine split is in the table: the two ablations do not add up exactly.)
    def share(r: dict, key: str) -> float:
        v = r.get("default_variant", "simple")
        ms, kernel = r.get(key.format(v=v), nan), r.get(f"kernel_{v}_ring_ms", nan)
        return max(0.0, 100 * ms / kernel) if ms == ms and kernel == kernel and kernel else 0.0
    # Rounds before the epilogue ablation have no mainloop_only: their GEMM bar is then whole (epilogue 0).
    gemm = [share(r, "mainloop_only_{v}_ms") or share(r, "no_comm_{v}_ms") for r in rows]
    epilogue = [share(r, "epilogue_{v}_ms") for r in rows]
    comm = [share(r, "not_hidden_total_{v}_ms") for r in rows]
    right.bar(x, gemm, 0.6, label="GEMM mainloops and task hand-offs (communication and epilogues ablated)")
    right.bar(x, epilogue, 0.6, bottom=gemm, label="GEMM epilogues (SwiGLU, staging, stores)")
    right.bar(x, comm, 0.6, bottom=[g + e for g, e in zip(gemm, epilogue)], label="dispatch + combine not hidden")
    right.set_title("where the ring-mode kernel's time goes (timing ablations)")
    right.set_ylabel("% of the ring-mode kernel")
    for ax in (left, right):
        ax.set_xticks(x)
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.legend(fontsize=7, loc="lower right" if ax is right else "upper left", ncol=1 if ax is right else 2)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{meta.get('device', '?')}, commit {meta.get('commit', '?')}, {meta.get('date', '?')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def replot(json_path: Path, out_dir: Path | None) -> int:
    """The table and the PNG again from a saved JSON (no GPU needed)."""
    doc = json.loads(Path(json_path).read_text())
    rows = [r for r in doc["shapes"] if "error" not in r]
    print(table(rows))
    png = plot(rows, doc["meta"], (out_dir or Path(json_path).parent) / (Path(json_path).stem + ".png"))
    print(f"wrote {png}" if png else "matplotlib missing: no plot")
    return 0


# ----------------------------------------------------------------------------------------------------------
# Main
# ----------------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma list of presets or T,H,I,E,K specs")
    parser.add_argument("--iters", type=int, default=20, help="timed calls per measurement (median)")
    parser.add_argument("--sets", type=int, default=3, help="input sets rotated through")
    parser.add_argument("--budget-s", type=float, default=110.0,
                        help="stop starting optional measurements (ablations, GEMM-only) and new shapes after this")
    parser.add_argument("--out", default=os.environ.get("OUT"), help="directory for the JSON (default $OUT)")
    parser.add_argument("--from-json", metavar="FILE", help="no measurement: print the table and draw the plot of a "
                        "saved JSON (into --out, default the JSON's folder)")
    args = parser.parse_args(argv)
    if args.from_json:
        return replot(Path(args.from_json), Path(args.out) if args.out else None)
    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        print("cuda_breakdown: needs a Hopper GPU (compute capability 9.x)")
        return 2
    t0 = time.monotonic()
    deadline = t0 + args.budget_s

    from mok.cuda.backend import check_mode
    from mok.cuda.build import load_extension
    load_extension()
    build_s = time.monotonic() - t0
    print(f"extension ready in {build_s:.1f} s")

    rows = []
    specs = [s.strip() for s in args.shapes.split(",") if s.strip()]
    for k, spec in enumerate(specs):
        if time.monotonic() > deadline:
            print(f"budget of {args.budget_s:.0f} s spent: skipping {specs[k:]}")
            break
        shape = SHAPES.get(spec) or get_shape(spec)
        start = time.monotonic()
        try:
            rows.append(derive(measure_shape(shape, args.iters, args.sets, deadline)))
        except Exception as err:  # noqa: BLE001 -- one failing shape must not lose the others' results
            print(f"{shape.name}: FAILED {type(err).__name__}: {err}")
            rows.append({"shape": shape.name, "error": f"{type(err).__name__}: {err}"})
            continue
        r = rows[-1]
        print(f"{shape.name}: layer {fmt(r['layer_ms'], 3)} ms, kernel {fmt(r.get('kernel_simple_ms'), 3)} / "
              f"{fmt(r.get('kernel_pipelined_ms'), 3)} ms, no-comm {fmt(r.get('no_comm_simple_ms'), 3)} ms, "
              f"schedule gpu {fmt(r.get('schedule_gpu_ms'), 3)} ms ({time.monotonic() - start:.1f} s)")

    props = torch.cuda.get_device_properties(0)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "device": f"{props.name} ({props.multi_processor_count} SMs)", "torch": torch.__version__,
            "commit": os.environ.get("MOK_GIT_COMMIT", "unknown"), "check_mode": check_mode(),
            "iters": args.iters, "sets": args.sets, "extension_ready_s": round(build_s, 1),
            "total_s": round(time.monotonic() - t0, 1),
            "env": {k: v for k, v in os.environ.items() if k.startswith("MOK_CUDA")}}
    if args.out:
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        path = out_dir / f"cuda_breakdown_{stamp}.json"
        path.write_text(json.dumps({"meta": meta, "shapes": rows}, indent=1, default=str))
        print(f"wrote {path}")
        png = plot([r for r in rows if "error" not in r], meta, path.with_suffix(".png"))
        if png:
            print(f"wrote {png}")
    good = [r for r in rows if "error" not in r]
    print(f"\n{meta['device']}, commit {meta['commit']}, {meta['date']}, {meta['total_s']} s; ms are medians, "
          f"TF/s = 6TKHI / time; not hidden = kernel - kernel with that communication removed "
          f"({good[0]['default_variant'] if good else 'simple'} variant)")
    print(table(good))
    return 0 if len(good) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
