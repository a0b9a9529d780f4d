"""One small forward through the SM90 megakernel, checked against the reference backend.

Meant to run under compute-sanitizer (build the extension first, outside the sanitizer)::

    python -m mok.cuda.build --jit
    compute-sanitizer --tool memcheck  python -m mok.cuda.sanitize_check
    compute-sanitizer --tool racecheck python -m mok.cuda.sanitize_check

The default problem has 2 emulated ranks, 8 experts with skewed routing (low ids hot), tokens that are not a
multiple of the tile, I % 128 == 64 (a half-used gate/up column block), H % 256 != 0 (a half-used down column
block) and a ring of one minibatch; it runs with top-k 2 (push-combine and the weighted sum) and top-k 1 (the
fused top-1 combine), in both dispatch modes (ring and gather), with the saved gate/up rows of training, with the
down tiles pushed into the slots or stored by TMA into y and the weighted sum in the combine tasks or the sum kernel
(both of each), once more in ring mode with precision="mxfp8" (packed MXFP8 token rows, h rounded through MXFP8),
once in ring mode recording the task timeline into fewer rows than the launch has tasks, and in 2-CTA clusters
(pipelined, ring mode, both top-k and precisions: 640 tokens on 4 experts, steps of 3 tiles), so every code path of
the kernel runs at least once. The in-kernel wait bound is raised to 600 s because the sanitizer slows the kernel by orders of magnitude.

``--bench T,H,I,E,K`` instead times both variants in both dispatch modes at that shape (CUDA events, median of 20
launches after 3 warm-ups; forward FLOPs 6*T*K*H*I; ``--prefetch-sweep`` adds gather with L2 prefetch) and prints
one line per configuration. Exit status 0 means the forward matched the reference (relative error below 1e-2)
and the kernel recorded no error.
"""

from __future__ import annotations

import argparse
import sys

import torch

import mok
from mok.bench.harness import time_fn
from mok.config import MoKConfig, get_shape
from mok.cuda.backend import (DISPATCH_MODES, TRACE_FIELDS, VARIANTS, check_error, launch, prepare,
                              saved_gate_up_buffer, trace_buffer)
from mok.validate import TOLERANCE, relative_error


def make_inputs(tokens, hidden, intermediate, experts, top_k, *, seed=0, skew=0.0, device="cuda"):
    """Random bf16 inputs generated on the GPU (fast at large shapes); ``skew`` biases routing to low ids."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen, device=device).to(torch.bfloat16)
    logits = torch.randn(tokens, experts, generator=gen, device=device)
    if skew:
        logits = logits - skew * torch.arange(experts, dtype=torch.float32, device=device)
    topk_weights, topk_ids = mok.route(logits, top_k, check_inputs=False)
    w_gate = (torch.randn(experts, intermediate, hidden, generator=gen, device=device) * hidden ** -0.5).to(torch.bfloat16)
    w_up = (torch.randn(experts, intermediate, hidden, generator=gen, device=device) * hidden ** -0.5).to(torch.bfloat16)
    w_down = (torch.randn(experts, hidden, intermediate, generator=gen, device=device) * intermediate ** -0.5).to(torch.bfloat16)
    return x, topk_ids, topk_weights, w_gate, w_up, w_down


def check_small(variant: str, top_k: int = 2, dispatch: str = "ring", precision: str = "bf16",
                overlap_steps: bool = False, down_tma: bool = False, sum_kernel: bool | None = None,
                clusters: bool = False) -> bool:
    # Gather mode at I = 256: its down span (2 blocks of H = 320) reuses the A in the stages (produce_task).
    # Clusters: experts of about 2.5 tiles and steps of 3 tiles, so that a step has a pair and a tile alone.
    tokens, experts = (640, 4) if clusters else (200, 8)
    problem = make_inputs(tokens, 320, 256 if dispatch == "gather" else 192, experts, top_k, skew=1.5)
    # Overlapped steps need a ring of two minibatches (scheduler.cuh).
    config = (MoKConfig(minibatch_rows=384, ring_rows=384) if clusters else
              MoKConfig(minibatch_rows=128, ring_rows=256 if overlap_steps else 128))
    prep = prepare(*problem, ep_size=2, config=config, poison=True, precision=precision)
    # The saved gate/up rows (training) are written too, so their stores run under the sanitizer.
    saved = saved_gate_up_buffer(prep, poison=True)
    out = launch(prep, variant=variant, timeout_s=600.0, dispatch=dispatch, saved_gate_up=saved,
                 overlap_steps=overlap_steps, down_tma=down_tma, sum_kernel=sum_kernel, clusters=clusters)
    check_error(prep)
    with torch.no_grad():
        ref = mok.moe(*problem, backend="reference", ep_size=2, config=config)
    err = relative_error(out, ref)
    finite = bool(torch.isfinite(out).all())
    fused = " (fused top-1 combine)" if prep.fuse_top1 else ""
    overlapped = (" overlapped steps" if overlap_steps else "") + (" down_tma" if down_tma else "")
    overlapped += ("" if sum_kernel is None else f" sum_kernel={sum_kernel}") + (" clusters" if clusters else "")
    print(f"variant={variant} dispatch={dispatch} top_k={top_k}{fused}{overlapped} precision={precision}: "
          f"relative error vs the bf16 reference {err:.3e}, all finite: {finite}")
    return finite and err < (1e-2 if precision == "bf16" else TOLERANCE["mxfp8"])


def check_trace(variant: str) -> bool:
    """The task timeline under the sanitizer: the small top-2 forward in ring mode recording into the first tickets of
    a timeline buffer only (a view of its first rows), so the marks' stores and their bound run; the output must still
    match the reference, every ticket of the view must be recorded, and the rows past the view must stay -1."""
    problem = make_inputs(200, 320, 192, 8, 2, skew=1.5)
    config = MoKConfig(minibatch_rows=128, ring_rows=128)
    prep = prepare(*problem, ep_size=2, config=config, poison=True)
    timeline = trace_buffer(prep)
    view_rows = 24  # fewer than the launch's tasks (dispatch, gate/up, down and combine of 2 ranks)
    out = launch(prep, variant=variant, timeout_s=600.0, dispatch="ring", trace=timeline[:view_rows])
    check_error(prep)
    with torch.no_grad():
        ref = mok.moe(*problem, backend="reference", ep_size=2, config=config)
    err = relative_error(out, ref)
    who = TRACE_FIELDS.index("who")  # the fields every task has (the mainloop marks are GEMM tasks' only)
    inside = bool((timeline[:view_rows, :who + 1] >= 0).all())
    untouched = bool((timeline[view_rows:] == -1).all())
    print(f"variant={variant} dispatch=ring top_k=2 with the task timeline (first {view_rows} tickets): relative "
          f"error vs the bf16 reference {err:.3e}, the first {view_rows} recorded: {inside}, nothing past them: "
          f"{untouched}")
    return err < 1e-2 and inside and untouched


# (variant, dispatch, gather_prefetch) configurations that --bench times; --prefetch-sweep adds gather with L2
# prefetch 4, 8 and 16 K blocks ahead.
BENCH_CONFIGS = [(v, mode, 0) for v in VARIANTS for mode in DISPATCH_MODES]
PREFETCH_SWEEP = [(v, "gather", pf) for v in VARIANTS for pf in (4, 8, 16)]


def bench(shape_spec: str, ep_size: int, prefetch_sweep: bool = False) -> None:
    shape = get_shape(shape_spec)
    problem = make_inputs(shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k)
    prep = prepare(*problem, ep_size=ep_size)
    for variant, dispatch, prefetch in BENCH_CONFIGS + (PREFETCH_SWEEP if prefetch_sweep else []):
        ms = time_fn(lambda _: launch(prep, variant=variant, dispatch=dispatch, gather_prefetch=prefetch),
                     device=prep.out.device, warmup=3, iters=20).median_ms
        check_error(prep)
        mode = f"gather prefetch={prefetch}" if dispatch == "gather" else dispatch
        print(f"{shape.name} ({shape.describe()}) ep={ep_size} variant={variant} dispatch={mode}: {ms:.3f} ms, "
              f"{shape.forward_flops / ms / 1e9:.1f} TFLOP/s (kernel only; schedule build excluded)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one small SM90 megakernel forward (for compute-sanitizer)")
    parser.add_argument("--variant", choices=[*VARIANTS, "both"], default="both")
    parser.add_argument("--dispatch", choices=[*DISPATCH_MODES, "both"], default="both")
    parser.add_argument("--bench", metavar="SHAPE", help="time both variants at a preset name or 'T,H,I,E,K'")
    parser.add_argument("--ep", type=int, default=1, help="emulated ranks for --bench")
    parser.add_argument("--prefetch-sweep", action="store_true", help="--bench also times gather with L2 prefetch")
    parser.add_argument("--clusters-only", action="store_true", help="only the forwards in 2-CTA clusters")
    args = parser.parse_args(argv)
    if args.bench:
        bench(args.bench, args.ep, args.prefetch_sweep)
        return 0
    variants = list(VARIANTS) if args.variant == "both" else [args.variant]
    modes = list(DISPATCH_MODES) if args.dispatch == "both" else [args.dispatch]
    # 2-CTA clusters (pipelined, ring mode): the pairs' multicast, the pair scheduler's posts.
    clusters = [check_small("pipelined", top_k, "ring", precision, clusters=True) for top_k in (2, 1)
                for precision in ("bf16", "mxfp8") if "pipelined" in variants and "ring" in modes]
    if args.clusters_only:
        return 0 if all(clusters) else 1
    ok = all(clusters + [check_small(v, top_k, d) for v in variants for d in modes for top_k in (2, 1)]
             + [check_small(v, top_k, "ring", "mxfp8") for v in variants for top_k in (2, 1) if "ring" in modes]
             + [check_trace(v) for v in variants if "ring" in modes]
             + [check_small(v, 2, d, overlap_steps=True) for v in variants for d in modes]
             + [check_small(v, 2, d, down_tma=True) for v in variants for d in modes]
             # The sum kernel (default with down_tma, above) on the pushed slots, and the combine tasks through y.
             + [check_small(v, 2, d, down_tma=tma, sum_kernel=not tma) for v in variants for d in modes
                for tma in (False, True)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
