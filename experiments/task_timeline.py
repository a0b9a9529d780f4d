"""EXPERIMENT (round 13): where each SM's time goes, task by task, from the megakernel's own timeline.

``launch(prep, trace=trace_buffer(prep))`` records, for every ticket, when the producer claimed it, when its
dependencies were met, when the consumers took it from the task queue and when it was signalled, for GEMM tasks also
when the first K block landed and when the mainloop ended (%globaltimer ns, ``mok/cuda/include/mok/trace.cuh``), and
which CTA ran which kind of task. From that, per shape:

* **consumer time** per task: from the consumers taking it to the consumers taking the CTA's next task (the last
  task of a CTA: to its signal). A CTA's consumer time is split among its tasks with nothing left over, so per kind
  it says where the consumer warpgroups spent the launch, waits for loads and dependencies inside a task included;
* the **rate** of each GEMM kind while it runs: its FLOPs over its consumer time, times the SM count (the chip-wide
  TFLOP/s if every SM ran only that kind; compare the bare mainloop, ``mainloop_gap.py``);
* **dependency wait** (claim to ready) and **queue lead** (ready to the consumers taking it: near 0 means the
  consumers were waiting for this task, so a dependency or claim held them up);
* the **tail**: how long each CTA sits idle between its last signal and the launch's end;
* per GEMM kind, its consumer time **split** into waiting for the first K block, the mainloop and the rest (the
  epilogue and the hand-off to the next task), and the **claim lead** (claim to the consumers taking it).

It writes ``task_timeline_<shape>_<dispatch>[_<ablation>...][_<patch>].{json,png}`` (the PNG: the first CTAs'
timelines and each kind's share) into ``experiments/results/`` (and ``$OUT/results``). The timeline is one launch
after warm-up launches; recording it changes no bit (``tests/test_cuda_trace_gpu.py``) and costs a store per mark
(and, per GEMM task, consumer thread 0's own wait for the first K block, the phase the mainloop waits for anyway).

Run on the H200:  python experiments/task_timeline.py [--dispatch ring|gather|auto] [--ablate epilogue,...] [--patch P]
                                                    [--clusters] [--spread-dispatch] [--ctas-shown 12] [SHAPE ...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

KINDS = {1: "dispatch", 2: "gate_up", 3: "down", 4: "combine"}  # mok.cuda.backend.TASK_KINDS (no torch import here)
COLORS = {"dispatch": "tab:orange", "gate_up": "tab:blue", "down": "tab:green", "combine": "tab:red"}


def load_trace(rows: np.ndarray, padded: bool = False) -> dict[str, np.ndarray]:
    """The recorded tickets of an int64 ``[tickets, 7]`` trace (``mok.cuda.backend.TRACE_FIELDS``: claimed, ready,
    start, done, who, data_in, mainloop_done) as microseconds from the first claim (NaN where a GEMM-only mark is
    absent), with each task's CTA and kind name. ``padded``: a launch in clusters, whose task order has padding
    tickets that no task records (the recorded ones then need not be 0..n-1)."""
    recorded = rows[:, 4] >= 0
    n = int(recorded.sum())
    if n == 0 or not (padded or recorded[:n].all()):
        raise ValueError("the trace's recorded tickets are not 0..n-1")
    rows = rows[recorded]
    t0 = rows[:, 0].min()
    us = (rows[:, :4] - t0) / 1e3
    gemm_marks = np.where(rows[:, 5:7] >= 0, (rows[:, 5:7] - t0) / 1e3, np.nan)
    return {"claimed": us[:, 0], "ready": us[:, 1], "start": us[:, 2], "done": us[:, 3], "cta": rows[:, 4] >> 8,
            "kind": np.array([KINDS.get(int(k), "?") for k in rows[:, 4] & 0xFF]),
            "data_in": gemm_marks[:, 0], "mainloop_done": gemm_marks[:, 1]}


def consumer_time(tl: dict[str, np.ndarray]) -> np.ndarray:
    """Each task's consumer time (us): to the start of the next task its CTA took, or for a CTA's last task, to its
    signal. Sums per CTA to (its last signal - its first start)."""
    out = np.zeros(len(tl["start"]))
    for cta in np.unique(tl["cta"]):
        idx = np.flatnonzero(tl["cta"] == cta)
        idx = idx[np.argsort(tl["start"][idx], kind="stable")]
        out[idx[:-1]] = np.diff(tl["start"][idx])
        out[idx[-1]] = tl["done"][idx[-1]] - tl["start"][idx[-1]]
    return out


def summarize(tl: dict[str, np.ndarray], flops: dict[str, float], num_sms: int) -> dict:
    """Per kind: tasks, share of all CTAs' time, mean consumer us, chip-equivalent TFLOP/s (GEMM kinds), mean
    dependency wait, share of tasks the consumers waited for (queue lead under 1 us), mean claim lead; for the GEMM
    kinds (those in ``flops``) the mean consumer time split into data wait, mainloop (and its chip-equivalent rate)
    and epilogue, over the tasks that have both marks; and the launch's span, the CTAs' idle time before their
    first task and after their last."""
    busy = consumer_time(tl)
    span = float(tl["done"].max())  # from the first claim
    ctas = np.unique(tl["cta"])
    total = span * len(ctas)
    kinds = {}
    for kind in sorted(set(tl["kind"])):
        sel = tl["kind"] == kind
        mean_us = float(busy[sel].mean())
        entry = {"tasks": int(sel.sum()), "share": float(busy[sel].sum() / total), "consumer_us": mean_us,
                 "dependency_wait_us": float((tl["ready"][sel] - tl["claimed"][sel]).mean()),
                 "waited_for": float(((tl["start"][sel] - tl["ready"][sel]) < 1.0).mean())}
        if kind in flops:
            entry["chip_tflops"] = flops[kind] / (mean_us * 1e-6) / 1e12 * num_sms
            # The consumer time split: waiting for the first K block, the mainloop (first K block to complete
            # accumulators, so later loads that came late count here), and the rest (epilogue, hand-off to the next).
            data_wait = tl["data_in"][sel] - tl["start"][sel]
            mainloop = tl["mainloop_done"][sel] - tl["data_in"][sel]
            entry["data_wait_us"] = float(np.nanmean(data_wait))
            entry["mainloop_us"] = float(np.nanmean(mainloop))
            entry["epilogue_us"] = float(np.nanmean(busy[sel] - data_wait - mainloop))
            entry["mainloop_tflops"] = flops[kind] / (entry["mainloop_us"] * 1e-6) / 1e12 * num_sms
        # How long before the consumers took a task the producer had claimed it.
        entry["claim_lead_us"] = float((tl["start"][sel] - tl["claimed"][sel]).mean())
        kinds[kind] = entry
    first = np.array([tl["start"][tl["cta"] == c].min() for c in ctas])
    last = np.array([tl["done"][tl["cta"] == c].max() for c in ctas])
    return {"span_us": span, "ctas": int(len(ctas)), "kinds": kinds,
            "head_share": float(first.sum() / total), "tail_share": float((span - last).sum() / total),
            "tail_us_mean": float((span - last).mean()), "tail_us_max": float((span - last).max())}


def task_flops(shape, down_span: int = 1) -> dict[str, float]:
    """FLOPs of one task (multiply-adds x 2): gate/up 128 rows x 256 columns (128 gate, 128 up) x H, down 128 rows x
    256 columns x I per column block, ``down_span`` blocks per task (the kernel's tile sizes, mok/cuda/workspace.py;
    the launch's span: mok.cuda.backend.resolve_down_span)."""
    from mok.cuda.workspace import BLOCK_M, DOWN_COLUMNS, GATE_UP_COLUMNS
    return {"gate_up": 2.0 * BLOCK_M * 2 * GATE_UP_COLUMNS * shape.hidden,
            "down": 2.0 * BLOCK_M * DOWN_COLUMNS * shape.intermediate * down_span}


def format_summary(name: str, dispatch: str, s: dict) -> str:
    lines = [f"{name} ({dispatch}): span {s['span_us']:.0f} us on {s['ctas']} CTAs; before the first task "
             f"{100 * s['head_share']:.1f}%, after the last {100 * s['tail_share']:.1f}% "
             f"(mean {s['tail_us_mean']:.0f} us, max {s['tail_us_max']:.0f} us)",
             f"  {'kind':<9} {'tasks':>7} {'share':>7} {'us/task':>9} {'chip TFLOP/s':>13} {'dep wait us':>12} "
             f"{'waited for':>11}"]
    for kind, e in s["kinds"].items():
        rate = f"{e['chip_tflops']:.0f}" if "chip_tflops" in e else "-"
        lines.append(f"  {kind:<9} {e['tasks']:>7} {100 * e['share']:>6.1f}% {e['consumer_us']:>9.2f} {rate:>13} "
                     f"{e['dependency_wait_us']:>12.2f} {100 * e['waited_for']:>10.0f}%")
    gemm = {kind: e for kind, e in s["kinds"].items() if "mainloop_us" in e}
    if gemm:
        lines.append(f"  {'GEMM task':<9} {'claim lead us':>14} {'wait data us':>13} {'mainloop us':>12} "
                     f"{'(TFLOP/s)':>10} {'epilogue+ us':>13}")
        for kind, e in gemm.items():
            lines.append(f"  {kind:<9} {e['claim_lead_us']:>14.2f} {e['data_wait_us']:>13.2f} "
                         f"{e['mainloop_us']:>12.2f} {e['mainloop_tflops']:>10.0f} {e['epilogue_us']:>13.2f}")
    return "\n".join(lines)


def plot(tl: dict[str, np.ndarray], s: dict, title: str, ctas_shown: int):
    import matplotlib.pyplot as plt  # the caller's backend (a script on a headless machine gets Agg)
    busy = consumer_time(tl)
    fig, (ax, bar) = plt.subplots(1, 2, figsize=(14, 4.5), gridspec_kw={"width_ratios": [4, 1]})
    for row, cta in enumerate(sorted(np.unique(tl["cta"]))[:ctas_shown]):
        for kind, color in COLORS.items():
            sel = np.flatnonzero((tl["cta"] == cta) & (tl["kind"] == kind))
            if len(sel):
                ax.broken_barh(list(zip(tl["start"][sel], busy[sel])), (row - 0.4, 0.8), facecolors=color,
                               edgecolor="white", linewidth=0.2)
    ax.set_xlabel("us from the first claim")
    ax.set_ylabel("CTA")
    ax.set_title(f"{title}: consumer timeline of the first {ctas_shown} CTAs")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()], labels=list(COLORS),
              loc="upper right", fontsize=8)
    labels = list(s["kinds"]) + ["head + tail"]
    shares = [100 * e["share"] for e in s["kinds"].values()] + [100 * (s["head_share"] + s["tail_share"])]
    bar.bar(labels, shares, color=[COLORS.get(k, "tab:gray") for k in labels])
    bar.set_ylabel("% of all CTAs' time")
    bar.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    return fig


def plot_shares(summaries: dict[str, dict]):
    """One stacked bar per run (label -> summary): the share of all CTAs' time each kind of task took, and the time
    before the CTAs' first task and after their last."""
    import matplotlib.pyplot as plt  # the caller's backend (a script on a headless machine gets Agg)
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.55 * len(summaries)))
    labels = list(summaries)
    for row, label in enumerate(labels):
        s, left = summaries[label], 0.0
        parts = [(kind, s["kinds"][kind]["share"]) for kind in COLORS if kind in s["kinds"]]
        parts.append(("head + tail", s["head_share"] + s["tail_share"]))
        for kind, share in parts:
            ax.barh(row, 100 * share, left=left, color=COLORS.get(kind, "tab:gray"))
            if share > 0.04:
                ax.text(left + 50 * share, row, f"{100 * share:.0f}%", ha="center", va="center", fontsize=8,
                        color="white")
            left += 100 * share
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in [*COLORS.values(), "tab:gray"]]
    ax.legend(handles, [*COLORS, "head + tail"], loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=5, fontsize=8)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of all CTAs' time (consumer warpgroups)")
    fig.tight_layout()
    return fig


def record(name: str, dispatch: str = "auto", warmup: int = 3,
           **launch_options) -> tuple[dict[str, np.ndarray], dict, str]:
    """One traced launch of the megakernel at preset ``name`` (random inputs, after ``warmup`` untraced launches):
    ``(timeline, summary, dispatch mode)``. ``launch_options`` go to every launch (e.g. ``ablate=8``, a timing
    ablation of ``mok.cuda.backend.ABLATE``, or ``signal_warp=False``). Needs a Hopper GPU."""
    import torch

    from cuda_breakdown import SHAPES, Problem
    from mok.cuda import backend
    from mok.cuda.workspace import release_workspaces

    shape = SHAPES[name]
    p = Problem(shape, n_sets=1)
    prep = p.prepare(0)
    dispatch = backend.resolve_dispatch(dispatch, shape.intermediate)
    for _ in range(warmup):  # the clock and the caches as in a timed run
        backend.launch(prep, dispatch=dispatch, **launch_options)
    trace = backend.trace_buffer(prep)
    backend.launch(prep, dispatch=dispatch, trace=trace, **launch_options)
    backend.check_error(prep)
    tl = load_trace(trace.cpu().numpy(), padded=bool(launch_options.get("clusters")))
    span = backend.resolve_down_path(prep, dispatch, launch_options.get("down_tma"), launch_options.get("down_span"),
                                     launch_options.get("sum_kernel"))[1]
    summary = summarize(tl, task_flops(shape, span), torch.cuda.get_device_properties(0).multi_processor_count)
    del prep, p, trace
    release_workspaces()
    torch.cuda.empty_cache()
    return tl, summary, dispatch


def ablate_mask(names: str) -> int:
    """The launch's ``ablate`` bitmask from a comma list of names of ``mok.cuda.backend.ABLATE`` and ``PROBE``."""
    from mok.cuda.backend import ABLATE, PROBE

    known = {**ABLATE, **PROBE}
    mask = 0
    for name in filter(None, names.split(",")):
        if name not in known:
            raise SystemExit(f"unknown ablation {name!r}; known: {', '.join(known)}")
        mask |= known[name]
    return mask


def main() -> None:
    import matplotlib.pyplot as plt

    from mok.bench import harness

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shapes", nargs="*", default=["anchor-2", "anchor-5", "kimi-k2.7/ep64"])
    parser.add_argument("--dispatch", default="auto", choices=["ring", "gather", "auto"])
    parser.add_argument("--ctas-shown", type=int, default=12)
    parser.add_argument("--ablate", default="", help="comma list of timing ablations and probes of "
                        "mok.cuda.backend.ABLATE and PROBE (e.g. 'epilogue' or 'stores'; the results are then garbage)")
    parser.add_argument("--clusters", action="store_true", help="launch in 2-CTA clusters (launch(clusters=True): "
                        "the pipelined variant in ring mode)")
    parser.add_argument("--spread-dispatch", action="store_true", help="the spread-dispatch task order "
                        "(launch(spread_dispatch=True): ring mode, a ring of 2 or more minibatches)")
    parser.add_argument("--patch", type=Path, help="record a build of this tree with the patch's mok/cuda hunks "
                        "applied (a candidate kernel: experiments/ab_kernels.py)")
    args = parser.parse_args()
    ablate = ablate_mask(args.ablate)
    options = {"ablate": ablate}
    if args.clusters:
        options["clusters"] = True
    if args.spread_dispatch:
        options["spread_dispatch"] = True
    if args.patch:
        import tempfile

        from ab_kernels import patched_tree
        from mok.cuda.build import load_extension
        with tempfile.TemporaryDirectory() as tmp:
            options["extension"] = load_extension(source_root=patched_tree(args.patch, Path(tmp)))
    metadata = harness.collect_metadata()
    for name in args.shapes:
        tl, summary, dispatch = record(name, args.dispatch, **options)
        tag = (dispatch + "".join(f"_{a}" for a in args.ablate.split(",") if a) + ("_clusters" if args.clusters else "")
               + ("_spread" if args.spread_dispatch else "") + (f"_{args.patch.stem}" if args.patch else ""))
        print(format_summary(name, tag, summary), flush=True)
        stem = f"task_timeline_{name.replace('/', '_')}_{tag}"
        doc = {"metadata": metadata, "shape": name, "dispatch": dispatch, "ablate": args.ablate, "clusters": args.clusters,
               "spread_dispatch": args.spread_dispatch, "patch": str(args.patch) if args.patch else None, "summary": summary}
        fig = plot(tl, summary, f"{name} ({tag})", args.ctas_shown)
        for folder in harness.output_dirs(None):
            harness.write_json(doc, folder / f"{stem}.json")
            fig.savefig(folder / f"{stem}.png", dpi=110, bbox_inches="tight")
        plt.close(fig)


if __name__ == "__main__":
    main()
