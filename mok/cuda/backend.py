"""``backend="cuda"``: the SM90 megakernel forward, the Triton pipeline backward.

Forward. One persistent kernel (mok/cuda/include/mok/sm90_moe_forward.cuh) runs dispatch, the gate/up GEMM
with SwiGLU, the down GEMM with push-combine, and the fixed-order weighted sum for all ``ep_size`` emulated
ranks. What it reads is prepared here on the device, and no step of a call waits for the GPU:

* the schedule tables (:func:`mok.cuda.schedule_tables.build_kernel_schedule`: the tables of
  :func:`mok.schedule.build_schedule`, from two small kernels; worst-case capacity by default);
* the fixed buffers (ring ``ring_x`` / ``ring_h``, combine slots, counters, error record) from a workspace
  reused across calls of the same sizes (:mod:`mok.cuda.workspace`), reset by the kernel's own in-stream
  reset;
* peer pointer tables: rank r's token buffer, router weights, combine slots and output, as base addresses
  made on the device with one add each;
* the expert weights are read in place (gate and up land in one B stage through two TMA boxes), so there is
  nothing to stack, convert or cache.

MXFP8 (``precision="mxfp8"``): the contract of :mod:`mok.mxfp8` (every GEMM = dequantize, then bf16 multiply
with fp32 accumulation), with MXFP8 where bytes cross ranks: each source rank's x is quantized into packed rows
(:func:`mok.triton_ref.mxfp8_rows.pack_rows`: H + H/32 bytes instead of 2H), ring dispatch pulls them and
dequantizes on chip, and the gate/up epilogue rounds h through MXFP8 as the Triton MXFP8 pipeline does before
its down GEMM. The weights are exact bf16 copies of the MXFP8 weights (:meth:`mok.mxfp8.WeightCache.dequantized`, once per
weight version), so the GEMMs run at bf16 speed (include/mok/mxfp8.cuh says why not FP8 wgmma). Ring dispatch
only. The backward is the Triton MXFP8 backward on the saved gate/up rows.

Top-1 layers (``top_k == 1``: the EP-64 slices) fuse the weighted sum into the down epilogue by default
(``fuse_top1``): the same bits, without the combine slots and the combine tail.

Backward. There is no backward megakernel yet: :class:`CudaMoE` runs the Triton pipeline's backward without
its forward (:func:`triton_layer_gradients`). When a gradient is wanted, the megakernel also writes gate and up
(bf16, before SwiGLU) of every schedule row to a saved buffer (``MOK_CUDA_SAVE_GATE_UP``, default on; bf16
``[R * capacity, 2I]`` of activation memory), so the backward pulls only the token rows again and never reruns
the gate/up GEMM; with it off, the backward replays dispatch and the gate/up GEMM per minibatch (no down GEMM,
combine or weighted sum either way).

Variants (``variant=`` or ``MOK_CUDA_VARIANT``): ``"simple"`` (lock-step roles, the baseline) and
``"pipelined"`` (producer runs ahead, overlapped wgmma). Both compute the same bits.

Dispatch modes (``dispatch=`` or ``MOK_CUDA_DISPATCH``): ``"ring"`` (dispatch tasks pull token rows into the
ring, which the gate/up GEMM reads by TMA: MoK's design, and what real multi-GPU ranks need) and ``"gather"``
(the gate/up producer warps copy each tile's rows straight from the token buffers into shared memory: no
dispatch tasks and no ring, for ranks whose tokens are in this GPU's memory, as all emulated ranks are). Both
compute the same bits. ``"auto"`` (the default) picks per shape with :func:`resolve_dispatch`: gather re-reads
a tile's rows once per gate/up column block, ring copies them once, so gather wins only when I is small.

Environment:

* ``MOK_CUDA_VARIANT`` (default ``pipelined``);
* ``MOK_CUDA_SAVE_GATE_UP`` (default on): keep the gate/up rows for the backward (above);
* ``MOK_CUDA_DISPATCH`` (default ``auto``) and ``MOK_CUDA_GATHER_PREFETCH`` (gather mode: K blocks ahead that
  the producer asks L2 for token rows; default :data:`DEFAULT_GATHER_PREFETCH`, 0 = never);
* ``MOK_CUDA_CHECK``: how the kernel's error record is read: ``deferred`` (default: copied asynchronously
  after each launch and read at a later call once it has landed, so no call waits for the GPU; an error is
  reported one call late, see :mod:`mok.cuda.errors`), ``1`` / ``sync`` (read after every launch, which
  synchronises), ``0`` (never). Skipped while a CUDA graph is being captured.
  :func:`check_pending_errors` reads every deferred record now;
* ``MOK_CUDA_SIGNAL_WARP`` (default on), ``MOK_CUDA_STORE_WARPS`` (default on) and
  ``MOK_CUDA_GATHER_ROW_PREFETCH`` (default off): see :func:`default_signal_warp`, :func:`default_store_warps` and
  :func:`default_gather_row_prefetch`;
* ``MOK_CUDA_TIMEOUT_S`` (default 10): bound of every in-kernel wait;
* ``MOK_CUDA_FUSE_TOP1`` (default 1): fuse the top-1 combine into the down epilogue;
* ``MOK_CUDA_EARLY_COMBINE`` (default off): sum each token as soon as its K rows are pushed, during later GEMMs
  (:func:`default_early_combine`);
* ``MOK_CUDA_SKIP_PADDING_HALF`` (default on): a tile whose second 64 rows are all padding multiplies only its
  first 64 (:func:`default_skip_padding_half`);
* ``MOK_CUDA_DOWN_SPAN`` (default ``auto``): column blocks of 256 per down task (:func:`resolve_down_span`);
* ``MOK_CUDA_OVERLAP_STEPS`` (default off): each step's gate/up tasks share a group of the task order with the
  previous step's down tasks (:func:`resolve_overlap_steps`);
* ``MOK_CUDA_DOWN_TMA`` (default ``auto``: on where y is not much larger than the combine slots): the down tiles
  leave by TMA into a buffer in schedule order and the weighted sum reads through the inverse map
  (:func:`resolve_down_tma`);
* ``MOK_CUDA_DOWN_PING_PONG`` (default on where allowed: down_tma, the pipelined variant without the signal warp,
  I <= 256): the consumer warpgroups take turns on each down block's column halves (:func:`resolve_down_ping_pong`).
* ``MOK_CUDA_SUM_KERNEL`` (default ``auto``: with down_tma): the weighted sum of top-k > 1 layers runs as a kernel of
  its own right after the megakernel instead of as its combine tasks (:func:`resolve_sum_kernel`).
* ``MOK_CUDA_CLUSTERS`` (default off): 2-CTA clusters sharing each gate/up weight tile's load
  (:func:`resolve_clusters`).
* ``MOK_CUDA_SPREAD_DISPATCH`` (default off): each step's dispatch tasks for the next minibatch lie among its gate/up
  tasks in the task order (:func:`resolve_spread_dispatch`).
* ``MOK_CUDA_FIRST_DISPATCH_PARTS`` (default ``auto``): the first minibatch's dispatch in this many tasks per tile
  (ring mode; ``auto`` gives every CTA one), so that more CTAs share the copy every other task waits for
  (:func:`resolve_first_dispatch_parts`).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from ..backends import Backend, backward_may_follow, get_backend, register_backend
from ..heuristics import rank_minibatch_rows
from ..config import MoKConfig
from .build import load_extension
from .errors import DEFERRED, Sm90KernelError, describe_error, raise_if_error  # noqa: F401 (re-exported)
from .schedule_tables import COMBINE_BLOCK_TOKENS, KernelSchedule, build_kernel_schedule, combine_order
from .workspace import (BLOCK_M, DOWN_COLUMNS, GATE_UP_COLUMNS, MAX_FIRST_DISPATCH_PARTS, Sm90Workspace, WorkspaceKey,
                        current_stream_handle, get_workspace, launch_tickets)

VARIANTS = {"simple": 0, "pipelined": 1}
PRECISIONS = ("bf16", "mxfp8")
DISPATCH_MODES = ("ring", "gather")
# "auto" gathers when the gate/up GEMM has at most this many column blocks of GATE_UP_COLUMNS (I <= 512). Measured on the H200
# (2026-11-29, pipelined kernel): gather 13% and 10% faster at I = 256 (2 blocks: anchors 1, 2); ring 1% faster
# at I = 1024 (8 blocks) and 10-18% at I = 2048 (16 blocks), without L2 prefetch.
GATHER_MAX_COLUMN_BLOCKS = 4
# Prefetching the token rows into L2 ahead of the cp.async did not help on the H200 (2026-11-29: 0, 4, 8, 16 K
# blocks ahead at anchors 1, 3, 4, 5 and two EP-64 slices; none faster than 0 beyond noise), so it is off.
DEFAULT_GATHER_PREFETCH = 0
DEFAULT_RING_MINIBATCHES = 4  # ring size when MoKConfig.ring_rows is None (the ring never changes results)

# Timing ablations (workspace.cuh, AblateFlags): each removes one piece of work; results are garbage. Used by
# experiments/cuda_breakdown.py. ABLATE_COMM removes all communication; "epilogue" the GEMM epilogues' math and
# stores (with ABLATE_COMM: the GEMM mainloops and the task hand-offs alone).
ABLATE = {"dispatch": 1, "combine": 2, "push": 4, "epilogue": 8}
ABLATE_COMM = 7
ABLATE_ALL = 15
# Timing probes outside ABLATE_ALL: "stores" keeps the epilogues' math and staging but stores nothing to global
# memory (results garbage); "release_reds" signals counters with red.release, round 7's form (results exact).
PROBE = {"stores": 16, "release_reds": 32}


def _env_on(name: str, default: str) -> bool:
    return os.environ.get(name, default) not in ("0", "", "false", "False", "off")


def _capturing() -> bool:
    """A CUDA graph is being captured on the current stream (False without CUDA)."""
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def default_variant() -> str:
    return os.environ.get("MOK_CUDA_VARIANT", "pipelined")


def default_dispatch() -> str:
    return os.environ.get("MOK_CUDA_DISPATCH", "auto")


def resolve_dispatch(dispatch: str | None, intermediate: int) -> str:
    """``"ring"`` or ``"gather"`` for a layer of intermediate size ``intermediate`` (``None``: the default)."""
    dispatch = dispatch or default_dispatch()
    if dispatch == "auto":
        column_blocks = -(-intermediate // GATE_UP_COLUMNS)  # how often gather re-reads a tile's rows
        return "gather" if column_blocks <= GATHER_MAX_COLUMN_BLOCKS else "ring"
    if dispatch not in DISPATCH_MODES:
        raise ValueError(f"dispatch must be one of {(*DISPATCH_MODES, 'auto')}, got {dispatch!r}")
    return dispatch


def default_gather_row_prefetch() -> bool:
    """``MOK_CUDA_GATHER_ROW_PREFETCH`` (default off; EXPERIMENT): gather mode asks L2 for each tile row whole (one
    bulk prefetch of H x 2 bytes per row) when the tile starts. Slower or equal on every shape measured (H200,
    round 8, a fixed-order probe: mok/cuda/ROUNDS.md), so it stays off."""
    return _env_on("MOK_CUDA_GATHER_ROW_PREFETCH", "0")


def default_signal_warp() -> bool:
    """``MOK_CUDA_SIGNAL_WARP`` (default on): in the pipelined variant's ring mode an idle producer warp runs the
    gpu-scope fence and the counter updates of every finished task, so the consumer warpgroups never wait for
    them (mok/cuda/ROUNDS.md, round 8). Changes no bit."""
    return _env_on("MOK_CUDA_SIGNAL_WARP", "1")


def default_store_warps() -> bool:
    """``MOK_CUDA_STORE_WARPS`` (default on): with the signal warp, two more idle producer warps store the second
    half of each down tile's staged rows, and (bf16) each gate/up tile's h rows by TMA, so the consumer warpgroups
    start their next mainloop while those rows go out (include/mok/store_warps.cuh, mok/cuda/ROUNDS.md rounds 10, 15
    and 38). Changes no bit."""
    return _env_on("MOK_CUDA_STORE_WARPS", "1")


# The widest span the auto default takes (gather mode). Round 17 (A/B, kernel alone): 8 blocks 0.984x the time of 4
# at anchor-2, 6 blocks 0.989x the time of 2 at anchor-1.
MAX_AUTO_DOWN_SPAN = 8


# Ring mode with down_tma: the widest span whose down task runs at most this many K blocks of 64 (span x I <= 4096).
# Round 34 (A/B, one build, down_tma against the push with its store warps): at anchor-3 (I = 1,024) span 4 0.962x the
# time, span 2 0.971-0.975x, span 8 1.009x; at anchors 4-5 (I = 2,048) span 2 0.994-0.999x, span 4 1.038-1.057x.
MAX_RING_DOWN_TASK_KBLOCKS = 64


def resolve_down_span(down_span: int | str | None, dispatch: str, hidden: int, intermediate: int = 0,
                      down_tma: bool = False) -> int:
    """Column blocks of 256 per down task for a launch in ``dispatch`` mode ("ring" or "gather") with ``hidden``
    columns: ``down_span`` if it is a number, else ``MOK_CUDA_DOWN_SPAN`` (a number, or ``auto``, the default).

    ``auto``: in gather mode the widest divisor of ceil(H / 256) up to :data:`MAX_AUTO_DOWN_SPAN`; in ring mode with
    ``down_tma`` the widest divisor whose task runs at most :data:`MAX_RING_DOWN_TASK_KBLOCKS` K blocks of the down
    GEMM (``intermediate`` / 64 per block), else 1. A wider span resolves the rows' destinations and signals the task
    once per span instead of once per block, and at I = 256 lands the tile's A once (produce_task); too wide a span
    leaves the last wave with few, long tasks. Measured on the H200 (A/B of the kernel alone, gather mode): round 16,
    against one block per task, anchor-2 (16 blocks) 0.925-0.928x the time at span 4 and 0.956x at span 2, anchor-1
    (6 blocks) 0.977-0.979x at span 2; round 17, span 8 0.984x span 4 at anchor-2 and span 6 0.989x span 2 at
    anchor-1. Ring mode's push keeps one block per task for its store warps, whose hand-off is one block per task:
    without them span 2 was 1.005-1.013x slower at anchors 4-5 and the kimi slice (round 20); with down_tma (no store
    warps) see :data:`MAX_RING_DOWN_TASK_KBLOCKS`. Changes no bit (GPU test)."""
    if down_span is None:
        down_span = os.environ.get("MOK_CUDA_DOWN_SPAN", "auto")
    blocks = -(-hidden // DOWN_COLUMNS)
    if isinstance(down_span, str):
        if down_span == "auto":
            if dispatch == "gather":
                widest = MAX_AUTO_DOWN_SPAN
            elif down_tma:
                if intermediate < 1:
                    raise ValueError("resolve_down_span: ring mode with down_tma needs the intermediate size I")
                widest = max(1, MAX_RING_DOWN_TASK_KBLOCKS * 64 // intermediate)
            else:
                return 1
            return max(s for s in range(1, min(blocks, widest, MAX_AUTO_DOWN_SPAN) + 1) if blocks % s == 0)
        if not down_span.isdigit():
            raise ValueError(f"MOK_CUDA_DOWN_SPAN must be 'auto' or a positive integer, got {down_span!r}")
        down_span = int(down_span)
    if down_span < 1 or blocks % down_span:
        raise ValueError(f"down_span must be a positive divisor of the {blocks} column blocks of H, got {down_span}")
    return down_span


def resolve_first_dispatch_parts(parts: int | str | None) -> int:
    """Tasks per tile of the first minibatch's dispatch: ``parts`` (1..8) if given, else
    ``MOK_CUDA_FIRST_DISPATCH_PARTS`` (a number, or ``auto``, the default); 0 means auto: the launch gives every CTA
    one task (the first minibatch's tiles x parts about the CTA count, at most 8 parts; the minibatch counted full).
    Nothing else can start before those rows are in the ring, and one task per tile left most CTAs waiting (round 22:
    4.4% of the qwen slice's launch, 2-3% at the others). Changes no bit (GPU test)."""
    if parts is None:
        parts = os.environ.get("MOK_CUDA_FIRST_DISPATCH_PARTS", "auto")
    if isinstance(parts, str):
        if parts == "auto":
            return 0
        if not parts.isdigit():
            raise ValueError(f"MOK_CUDA_FIRST_DISPATCH_PARTS must be 'auto' or 1..{MAX_FIRST_DISPATCH_PARTS}, "
                             f"got {parts!r}")
        parts = int(parts)
    if not 0 <= parts <= MAX_FIRST_DISPATCH_PARTS:
        raise ValueError(f"first_dispatch_parts must be in 1..{MAX_FIRST_DISPATCH_PARTS} (or 0 / 'auto'), got {parts}")
    return int(parts)


def ring_holds_two_minibatches(ring_rows: int, minibatch_rows: int, capacity: int) -> bool:
    """Whether the ring holds 2 or more minibatches, or every minibatch of the schedule: then no task of step s waits
    for a task of step s - 1 to free its ring rows, which the orders that merge two steps' groups need (the launch
    checks the same in csrc/sm90_moe_forward.cu)."""
    return ring_rows // minibatch_rows >= min(2, -(-capacity // minibatch_rows))


def overlap_steps_allowed(ring_rows: int, minibatch_rows: int, capacity: int, early_combine: bool) -> bool:
    """Whether a launch can take the overlapped-steps order (include/mok/scheduler.cuh): step s's gate/up tasks then
    share a group with step s - 1's down tasks, so they must not wait for those (the ring holds 2 or more
    minibatches, or all of them), and early combine, whose blocks follow each step's down tasks, is off."""
    return not early_combine and ring_holds_two_minibatches(ring_rows, minibatch_rows, capacity)


def resolve_overlap_steps(overlap_steps: bool | None, allowed: bool) -> bool:
    """``overlap_steps`` if given (``True`` where :func:`overlap_steps_allowed` says no is an error), else
    ``MOK_CUDA_OVERLAP_STEPS`` (default off; where it is not allowed the plain order runs). Changes no bit.

    Off by default because it measured slower where it matters most (H200, round 18, A/B of the kernel alone, one
    build launched both ways): gather mode 0.996x the time at anchor-2 and 0.988x at anchor-1, but ring mode 1.056x
    at anchor-3, 1.041x at the qwen slice, 1.144x at the kimi slice and 1.187x at anchor-5, where each step's
    experts' weights no longer fit in L2 beside the previous step's (mok/cuda/ROUNDS.md, round 18). Kept as an
    option for research on the task order."""
    if overlap_steps is None:
        return _env_on("MOK_CUDA_OVERLAP_STEPS", "0") and allowed
    if overlap_steps and not allowed:
        raise ValueError("overlap_steps=True needs a ring of at least 2 minibatches (or the whole schedule) and "
                         "no early combine")
    return bool(overlap_steps)


def spread_dispatch_allowed(dispatch: str, ring_rows: int, minibatch_rows: int, capacity: int,
                            overlap_steps: bool) -> bool:
    """Whether a launch can take the spread-dispatch order (include/mok/scheduler.cuh, decode_spread): ring mode (gather
    mode has no dispatch tasks), step s + 1's dispatch tasks then share a group with step s's gate/up tasks, so they
    must not wait for those (the ring holds 2 or more minibatches, or all of them), and no overlapped steps."""
    return dispatch == "ring" and not overlap_steps and ring_holds_two_minibatches(ring_rows, minibatch_rows, capacity)


def resolve_spread_dispatch(spread_dispatch: bool | None, allowed: bool) -> bool:
    """``spread_dispatch`` if given (``True`` where :func:`spread_dispatch_allowed` says no is an error), else
    ``MOK_CUDA_SPREAD_DISPATCH`` (default off) where allowed. Each step's prefetch of the next minibatch's rows then
    runs beside its gate/up GEMMs, one dispatch task every few gate/up tasks, instead of as a group of copies between
    the step's gate/up and down tasks. Changes no bit (GPU test).

    Off by default because it measured slower (H200, round 44, held at the power limit): 1.019 / 1.014 / 1.013x the
    time at anchors 3 / 4 / 5, and 0.999-1.010x in 2-CTA clusters. The copies among the gate/up bands push the bands'
    weights out of L2 (anchor-5: 21.4 GB of DRAM reads against 19.7), and at 700 W the clock pays for the bytes
    (mok/cuda/ROUNDS.md, round 44). Kept as an option for research on the task order."""
    if spread_dispatch is None:
        return _env_on("MOK_CUDA_SPREAD_DISPATCH", "0") and allowed
    if spread_dispatch and not allowed:
        raise ValueError("spread_dispatch=True needs ring dispatch with a ring of at least 2 minibatches (or the whole "
                         "schedule) and no overlap_steps")
    return bool(spread_dispatch)


def down_tma_allowed(prep: "Sm90Launch") -> bool:
    """Whether a launch can take down_tma: emulated ranks (the y rows stay on this GPU) with combine tasks (top-k > 1:
    the fused top-1 combine writes the output in the down epilogue itself), bf16 (MXFP8 layers are not tested with
    it)."""
    return prep.local_rank < 0 and not prep.fuse_top1 and not prep.mxfp8


# auto takes down_tma only where y (R * capacity rows) is at most this much larger than the combine slots it replaces
# (R * T_local * K rows). With the worst-case capacity (every token's rows on one rank: the default) y is R times the
# slots at R emulated ranks (at anchor-2 with 8 ranks about 36 GB instead of 4.3); at one rank only the padding rows
# are extra: 6% at anchor-2, 8% at anchor-1 (round 19's review; computed from the schedule's capacity on random
# routing, not measured on a GPU).
DOWN_TMA_MAX_Y_RATIO = 1.25


def down_tma_y_fits(capacity: int, ranks: int, tokens_per_rank: int, top_k: int) -> bool:
    """Whether y (``[ranks * capacity, H]``) is at most :data:`DOWN_TMA_MAX_Y_RATIO` times the combine slots
    (``[ranks, tokens_per_rank * top_k, H]``)."""
    return ranks * capacity <= DOWN_TMA_MAX_Y_RATIO * ranks * tokens_per_rank * top_k


def resolve_down_tma(down_tma: bool | None, allowed: bool, dispatch: str, y_fits: bool = True,
                     ring_sums_by_kernel: bool = True) -> bool:
    """Whether a launch in ``dispatch`` mode stores its down tiles by TMA: ``down_tma`` if given (``True`` where
    :func:`down_tma_allowed` says no is an error), else ``MOK_CUDA_DOWN_TMA``: ``auto`` (the default) where allowed
    and ``y_fits`` (:func:`down_tma_y_fits`), in ring mode only where the sum kernel will then sum
    (``ring_sums_by_kernel``: ring mode's combine tasks through y measured slower than the push, below); ``1`` wherever
    allowed; ``0`` never. The launch then runs without the store warps (ring mode: the kernel turns them off) and, by
    default, sums in the sum kernel (:func:`resolve_sum_kernel`).

    down_tma: each consumer warpgroup stages its down rows and stores them with two TMA boxes per half into y, a
    buffer laid out like the schedule (:meth:`mok.cuda.workspace.Sm90Workspace.y_buffer`), instead of 16 KB of its
    own stores into the (token, k) combine slots; the down tasks write the inverse map (token, k) -> row of y
    (:meth:`mok.cuda.workspace.Sm90Workspace.y_rows_buffer`; :func:`y_rows_table` is its PyTorch reference) and the
    weighted sum reads y through it. The same bits (GPU tests). Measured on the H200 (A/B in one process, bitwise
    equal): gather mode, the kernel 0.945x (anchor-2) and 0.961x (anchor-1) the time of the push, the layer 0.945x
    and 0.967x (round 19; the layer again 0.946x and 0.964x in round 20). Ring mode, whose store warps it turns off:
    with the sums in the combine tasks the kernel 1.013x (anchor-3) and 1.038x (anchor-5) with a down span of 2,
    0.996x and 1.078x with 4 (round 20), so gather mode only until round 34; with the sum kernel 0.996-1.001x at anchors
    3-5 with one block per task, and with :func:`resolve_down_span`'s ring-mode span (4 at anchor-3, 2 at anchors 4-5)
    0.962x, 0.994-0.995x and 0.981-0.999x (round 34, calls 3-4), hence both modes. The layer then holds y instead of
    the combine slots."""
    if down_tma is None:
        value = os.environ.get("MOK_CUDA_DOWN_TMA", "auto").strip().lower()
        if value not in ("auto", "0", "1"):
            raise ValueError(f"MOK_CUDA_DOWN_TMA must be 'auto', '0' or '1', got {value!r}")
        auto = y_fits and (dispatch == "gather" or ring_sums_by_kernel)
        return allowed and (value == "1" or (value == "auto" and auto))
    if down_tma and not allowed:
        raise ValueError("down_tma=True needs emulated ranks, a top-k > 1 layer (combine tasks) and bf16")
    return bool(down_tma)


def y_rows_table(schedule: "KernelSchedule") -> torch.Tensor:
    """int32 ``[R, T_local * K]``: for source rank s's (token, k) slot, the row of y (``r * capacity + i``) that
    schedule row i of rank r holds for it: the inverse of the tables' (src_rank, src_slot). The reference of the map
    that a down_tma launch writes itself (its down tasks, into the workspace's ``y_rows``: a GPU test compares
    them); made here in PyTorch it cost 150 us of host time per layer (round 19). On the device by one scatter, no
    host synchronisation: padding rows, and rows that name no slot (an inconsistent schedule, which
    the kernel reports), go to a spare entry that is dropped; a (token, k) that no row holds keeps -1 (the kernel
    reports that too, instead of reading outside y)."""
    ranks, capacity = schedule.src_rank.shape
    slots = schedule.tokens_per_rank * schedule.top_k
    device = schedule.src_rank.device
    # An index past the table would be a device-side assert, which ends the process's CUDA context.
    valid = ((schedule.src_rank >= 0) & (schedule.src_rank < ranks) & (schedule.src_slot >= 0)
             & (schedule.src_slot < slots))
    target = torch.where(valid, schedule.src_rank.long() * slots + schedule.src_slot.long(),
                         torch.full_like(schedule.src_rank, ranks * slots, dtype=torch.long))
    rows = torch.arange(ranks * capacity, dtype=torch.int32, device=device)
    table = torch.full((ranks * slots + 1,), -1, dtype=torch.int32, device=device)
    table.scatter_(0, target.view(-1), rows)
    return table[:-1].view(ranks, slots)


def default_skip_padding_half() -> bool:
    """``MOK_CUDA_SKIP_PADDING_HALF`` (default on; pipelined variant): a GEMM tile whose rows 64..127 are all
    padding (the last tile of an expert with at most 64 rows left) runs only the first consumer warpgroup's wgmma;
    the second waits for and releases each stage without multiplying, its accumulators stay zero (what its zero
    rows give), and its epilogue runs as always. Changes no bit (GPU test); mok/cuda/ROUNDS.md, round 12."""
    return _env_on("MOK_CUDA_SKIP_PADDING_HALF", "1")


# A down block's whole K must fit in the stage ring for the ping-pong down task (kStages * kBlockK, workspace.cuh).
DOWN_PING_PONG_MAX_INTERMEDIATE = 256


def down_ping_pong_allowed(down_tma: bool, variant: str, signal_warp: bool, intermediate: int) -> bool:
    """Whether a launch can run the ping-pong down task: its down tiles leave by TMA (down_tma), the pipelined
    variant without the signal warp (``signal_warp``: whether the launch runs one; gather mode never does), so that
    the consumer warpgroups meet at every task's end, and I <= 256, so that one warpgroup's turn needs no stage the
    other has not released yet (csrc/sm90_moe_forward.cu refuses anything else)."""
    return (down_tma and variant == "pipelined" and not signal_warp
            and intermediate <= DOWN_PING_PONG_MAX_INTERMEDIATE)


def resolve_down_ping_pong(down_ping_pong: bool | None, allowed: bool) -> bool:
    """``down_ping_pong`` if given (``True`` where :func:`down_ping_pong_allowed` says no is an error), else
    ``MOK_CUDA_DOWN_PING_PONG`` (default on) where allowed. The two consumer warpgroups then take turns on the
    tensor cores: each multiplies one 128-column half of every down block over all 128 rows while the other runs its
    epilogue (include/mok/sm90_moe_forward.cuh, run_down_task). It changes no bit (the same products in the same K
    order; GPU test). Round 21 (mok/cuda/ROUNDS.md): kernel time off vs on 0.981 at anchor-2, 0.995 at anchor-1;
    the layer 0.995 and 0.987."""
    if down_ping_pong is None:
        return _env_on("MOK_CUDA_DOWN_PING_PONG", "1") and allowed
    if down_ping_pong and not allowed:
        raise ValueError("down_ping_pong=True needs down_tma, the pipelined variant without the signal warp, and "
                         f"I <= {DOWN_PING_PONG_MAX_INTERMEDIATE}")
    return bool(down_ping_pong)


def clusters_allowed(variant: str, dispatch: str, signal_warp: bool, overlap_steps: bool,
                     down_ping_pong: bool) -> bool:
    """Whether a launch can run in 2-CTA clusters: the pipelined variant in ring mode with the signal warp (the pair
    scheduler runs beside the signal thread and feeds the one producer thread of ring mode), without overlapped steps
    (a pair's two halves are two gate/up tiles of one group) or the ping-pong down task (csrc/sm90_moe_forward.cu
    refuses anything else)."""
    return (variant == "pipelined" and dispatch == "ring" and signal_warp and not overlap_steps
            and not down_ping_pong)


def resolve_clusters(clusters: bool | None, allowed: bool) -> bool:
    """``clusters`` if given (``True`` where :func:`clusters_allowed` says no is an error), else ``MOK_CUDA_CLUSTERS``
    (default off) where allowed. The kernel then runs in clusters of 2 CTAs, and the pairs of gate/up row tiles of one
    expert and column block load their weight tile once, each CTA half of it multicast to both
    (include/mok/cluster_pairs.cuh). Changes no bit (GPU test)."""
    if clusters is None:
        return _env_on("MOK_CUDA_CLUSTERS", "0") and allowed
    if clusters and not allowed:
        raise ValueError("clusters=True needs the pipelined variant in ring mode with the signal warp, without "
                         "overlap_steps or down_ping_pong")
    return bool(clusters)


def default_early_combine() -> bool:
    """``MOK_CUDA_EARLY_COMBINE`` (default off): top-k > 1 layers sum each token's K rows as soon as the step
    holding the last of them is done, during later steps' GEMMs, instead of all tokens after the last GEMM
    (include/mok/scheduler.cuh; :func:`mok.cuda.schedule_tables.combine_order`). Changes no bit. Off because it
    measured slower on the H200 (round 11, mok/cuda/ROUNDS.md: 0.5-2.3% on anchors 1-5, balanced A/B)."""
    return _env_on("MOK_CUDA_EARLY_COMBINE", "0")


# The sum kernel's table holds up to this many (token, k) rows per token (include/mok/weighted_sum.cuh, kSumMaxTopK).
SUM_KERNEL_MAX_TOP_K = 64


def sum_kernel_allowed(prep: "Sm90Launch", early_combine: bool) -> bool:
    """Whether a launch can run its weighted sum as a kernel of its own: emulated ranks (the sum kernel's grid covers
    every rank) with combine tasks (top-k > 1), top-k at most :data:`SUM_KERNEL_MAX_TOP_K`, without the early combine
    (whose sums run inside the steps)."""
    return (prep.local_rank < 0 and not prep.fuse_top1 and prep.top_k <= SUM_KERNEL_MAX_TOP_K
            and not early_combine)


def resolve_sum_kernel(sum_kernel: bool | None, allowed: bool, down_tma: bool) -> bool:
    """Whether a launch sums by a second kernel (``include/mok/weighted_sum.cuh``) instead of its combine tasks:
    ``sum_kernel`` if given (``True`` where :func:`sum_kernel_allowed` says no is an error), else
    ``MOK_CUDA_SUM_KERNEL``: ``auto`` (the default) where allowed and the down tiles leave by TMA (``down_tma``: the sum
    reads y through the inverse map), ``1`` wherever allowed, ``0`` never.

    In the megakernel the sums are the layer's tail, run by one CTA of eight consumer warps per SM (up to 16 loads of
    16 bytes in flight per thread: 64 KB per SM); the kernel runs three CTAs of eight warps per SM, each thread with 8
    loads in flight (96 KB per SM), and has no per-task table fill and barriers. Same arithmetic, same bits (GPU
    tests). Measured on the H200 (round 34, ``ab_kernels.py``, one build launched both ways, bitwise equal): with
    down_tma (gather mode, where each combine task first fills a table of its rows of y) the whole forward 0.959x
    (anchor-1) and 0.977x (anchor-2) the time with the combine tasks; with the pushed slots (ring mode) 0.999x, 1.006x
    and 0.999x at anchors 3-5, hence ``auto``. The sum kernel read 4.15 TB/s at anchor-2 (1.10 ms) and 3.95 TB/s at
    anchor-3 (0.34 ms)."""
    if sum_kernel is None:
        value = os.environ.get("MOK_CUDA_SUM_KERNEL", "auto").strip().lower()
        if value not in ("auto", "0", "1"):
            raise ValueError(f"MOK_CUDA_SUM_KERNEL must be 'auto', '0' or '1', got {value!r}")
        return allowed and (value == "1" or (value == "auto" and down_tma))
    if sum_kernel and not allowed:
        raise ValueError(f"sum_kernel=True needs emulated ranks, a top-k > 1 layer (combine tasks), top-k at most "
                         f"{SUM_KERNEL_MAX_TOP_K} and no early combine")
    return bool(sum_kernel)


def default_fuse_top1(top_k: int) -> bool:
    """``MOK_CUDA_FUSE_TOP1`` (default on) for a top-1 layer: its down epilogue writes the weighted rows into the
    output itself (no combine slots). Same bits either way."""
    return top_k == 1 and _env_on("MOK_CUDA_FUSE_TOP1", "1")


def default_gather_prefetch() -> int:
    return int(os.environ.get("MOK_CUDA_GATHER_PREFETCH", str(DEFAULT_GATHER_PREFETCH)))


def check_mode() -> str:
    """``MOK_CUDA_CHECK`` as one of ``"deferred"``, ``"sync"``, ``"off"``."""
    value = os.environ.get("MOK_CUDA_CHECK", "deferred").strip().lower()
    if value in ("0", "", "false", "off", "no"):
        return "off"
    if value in ("1", "true", "sync", "yes", "on"):
        return "sync"
    if value == "deferred":
        return "deferred"
    raise ValueError(f"MOK_CUDA_CHECK must be deferred, sync (1) or off (0), got {value!r}")


@dataclass
class Sm90Launch:
    """Everything one launch reads and writes (R ranks, T_local tokens per rank, K top-k).

    Attributes:
        schedule: the schedule tables of all R ranks (:class:`KernelSchedule`).
        tokens_per_rank, top_k, minibatch_rows: sizes (host ints; the ring size is the workspace's).
        fuse_top1: the down epilogue writes ``out`` itself (top_k == 1; no combine slots or combine tasks).
        x: bf16 [T, H] tokens (kept alive here: the pointer table holds its address).
        weights: fp32 [T * K] router weights (likewise).
        out: bf16 [T, H], the layer output (written by the launch).
        x_ptrs, weight_ptrs, combine_ptrs, out_ptrs: int64 [R] peer pointer tables (rank r's buffer address);
            ``combine_ptrs`` is ``out_ptrs`` when fused (never dereferenced then), or None for the workspace's
            combine slots, made by the first launch that pushes into them (:meth:`Sm90Workspace.combine_slot_table`;
            a launch with down_tma needs none).
        w_gate, w_up: bf16 [E, I, H]; w_down: bf16 [E, H, I] (contiguous).
        workspace: the fixed buffers (ring, combine slots, counters, error record).
        x_row_bytes: bytes per token row in ``x`` (bf16: 2H; MXFP8: the packed width).
        mxfp8: ``x`` holds packed MXFP8 rows and the weights are the dequantized MXFP8 weights.
        local_rank, phases: ``-1, 3``: every rank emulated in the launch; ``r, 1`` or ``r, 2``: the expert tasks
            or the combine of real rank r (:mod:`mok.cuda.rank_run`; the weights are then rank r's only).
        combine_tokens, combine_offsets: int32 ``[R, T_local]`` and ``[R, steps + 1]``, the early-combine order
            (:func:`mok.cuda.schedule_tables.combine_order`), or None (every weighted sum after the last GEMM).
    """

    schedule: KernelSchedule
    tokens_per_rank: int
    top_k: int
    minibatch_rows: int
    fuse_top1: bool
    x: torch.Tensor
    weights: torch.Tensor
    out: torch.Tensor
    x_ptrs: torch.Tensor
    weight_ptrs: torch.Tensor
    combine_ptrs: torch.Tensor | None
    out_ptrs: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor
    workspace: Sm90Workspace
    x_row_bytes: int = 0
    mxfp8: bool = False
    local_rank: int = -1
    phases: int = 3
    combine_tokens: torch.Tensor | None = None
    combine_offsets: torch.Tensor | None = None


def ring_rows_for(config: MoKConfig, capacity: int, minibatch_rows: int) -> int:
    """``config.ring_rows``, or DEFAULT_RING_MINIBATCHES minibatches (fewer if the schedule is smaller)."""
    if config.ring_rows is not None:
        if config.ring_rows % minibatch_rows:
            raise ValueError(f"MoKConfig.ring_rows ({config.ring_rows}) must be a multiple of the minibatch "
                             f"size ({minibatch_rows} rows)")
        return config.ring_rows
    minibatches = -(-capacity // minibatch_rows)
    return min(minibatches, DEFAULT_RING_MINIBATCHES) * minibatch_rows


def workspace_for(config: MoKConfig, device: torch.device, *, num_ranks: int, tokens_per_rank: int, top_k: int,
                  hidden: int, intermediate: int, local_experts: int, capacity: int, fuse_top1: bool,
                  reuse: bool, one_rank: bool = False) -> Sm90Workspace:
    """The fixed buffers of a launch on the current stream, sized by the minibatch heuristic
    (:func:`mok.heuristics.rank_minibatch_rows`, at most ``capacity``) and :func:`ring_rows_for`; the minibatch
    size is ``.key.minibatch_rows``. ``reuse``: from the per-size cache (layer calls), else private (tests, CUDA
    graphs); inside a CUDA graph capture always private, made in the capture (:mod:`mok.cuda.workspace`).
    ``one_rank``: one real rank per launch (:mod:`mok.cuda.rank_run`)."""
    minibatch_rows = rank_minibatch_rows(tokens_per_rank, hidden, intermediate, local_experts, top_k, device, config)
    # A minibatch larger than the table would only size the ring (and the counters) past what is ever used.
    minibatch_rows = min(minibatch_rows, capacity)
    ring_rows = ring_rows_for(config, capacity, minibatch_rows)
    key = WorkspaceKey(str(device), current_stream_handle(device), num_ranks, tokens_per_rank, top_k, hidden,
                       intermediate, capacity, minibatch_rows, ring_rows, bool(fuse_top1), one_rank)
    capturing = _capturing()
    return get_workspace(key) if reuse and not capturing else Sm90Workspace(key, in_capture=capturing)


def check_problem(x: torch.Tensor, w_gate: torch.Tensor, ep_size: int, config: MoKConfig) -> None:
    """What the megakernel needs of a layer (tile 128, bf16 activations, H and I multiples of 64, tokens and
    experts divisible by ``ep_size``); raises ValueError or TypeError naming the first that fails."""
    if config.expert_padding != BLOCK_M:
        raise ValueError(f"backend 'cuda' needs MoKConfig.expert_padding == {BLOCK_M} (its tile height), "
                         f"got {config.expert_padding}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"backend 'cuda' takes bf16 activations (precision 'bf16' or 'mxfp8'), got x of dtype "
                        f"{x.dtype}")
    tokens, hidden = x.shape
    num_experts, intermediate, _ = w_gate.shape
    if tokens % ep_size or num_experts % ep_size:
        raise ValueError(f"tokens ({tokens}) and experts ({num_experts}) must be divisible by ep_size ({ep_size})")
    for name, size in (("hidden size H", hidden), ("intermediate size I", intermediate)):
        if size % 64:
            raise ValueError(f"backend 'cuda' needs the {name} to be a multiple of 64, got {size}")


def prepare(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate: torch.Tensor,
            w_up: torch.Tensor, w_down: torch.Tensor, *, ep_size: int = 1, config: MoKConfig | None = None,
            poison: bool = False, schedule: KernelSchedule | None = None, reuse_workspace: bool = False,
            fuse_top1: bool | None = None, precision: str = "bf16", for_backward: bool = False,
            early_combine: bool | None = None) -> Sm90Launch:
    """Schedule tables, pointer tables and buffers for one launch (no launch yet, no host synchronisation).

    Args:
        x: [T, H] bf16 tokens; T divisible by ``ep_size``.
        topk_ids: [T, K] int expert ids; topk_weights: [T, K] router weights (any float dtype; used as fp32).
        w_gate, w_up: [E, I, H] bf16; w_down: [E, H, I] bf16.
        poison: fill the output, the combine slots and the ring with NaN first (tests: an element the kernel
            fails to write, or a stale value it reads, shows up as NaN).
        schedule: prebuilt tables for this routing (default: built here).
        reuse_workspace: take the fixed buffers from the per-size cache (layer calls) instead of allocating
            private ones (tests, CUDA graphs).
        fuse_top1: fuse the weighted sum into the down epilogue; default: ``top_k == 1`` and
            ``MOK_CUDA_FUSE_TOP1`` on. Same bits either way.
        precision: ``"bf16"`` or ``"mxfp8"`` (module docstring: x packed into MXFP8 rows, the weights replaced by
            their dequantized MXFP8 copies; ``for_backward`` quantizes the weights' dgrad orientations too).
        early_combine: build the early-combine order (default :func:`default_early_combine`); only layers with
            combine tasks (not the fused top-1 combine) have one. Same bits either way.
    """
    config = config or MoKConfig()
    if precision not in PRECISIONS:
        raise ValueError(f"backend 'cuda' supports precision in {PRECISIONS}, got {precision!r}")
    check_problem(x, w_gate, ep_size, config)
    tokens, hidden = x.shape
    num_experts, intermediate, _ = w_gate.shape
    top_k = topk_ids.shape[1]
    tokens_per_rank = tokens // ep_size
    if fuse_top1 is None:
        fuse_top1 = default_fuse_top1(top_k)
    elif fuse_top1 and top_k != 1:
        raise ValueError(f"fuse_top1 needs top_k == 1 (one slot per token), got top_k = {top_k}")

    if schedule is None:
        schedule = build_kernel_schedule(topk_ids, num_experts, ep_size, BLOCK_M, config.capacity_rows)
    workspace = workspace_for(config, x.device, num_ranks=ep_size, tokens_per_rank=tokens_per_rank, top_k=top_k,
                              hidden=hidden, intermediate=intermediate, local_experts=num_experts // ep_size,
                              capacity=schedule.capacity, fuse_top1=fuse_top1, reuse=reuse_workspace)
    minibatch_rows = workspace.key.minibatch_rows

    x = x.detach().contiguous()
    mxfp8 = precision == "mxfp8"
    if mxfp8:
        from ..triton_ref.mxfp8_rows import pack_rows  # Triton: the cuda backend's backward needs it anyway
        from ..mxfp8 import weight_cache
        w_gate, w_up, w_down = weight_cache().dequantized(w_gate, w_up, w_down, for_backward=for_backward)
        x = pack_rows(x)  # uint8 [T, packed_width(H)]: codes, scales, pad
    weights = topk_weights.detach().to(torch.float32).contiguous().view(-1)
    out = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=x.device)
    if poison:
        out.fill_(float("nan"))
        workspace.poison()
    out_ptrs = workspace.rank_pointer_table(out.view(ep_size, tokens_per_rank, hidden))
    if early_combine is None:
        early_combine = default_early_combine()
    order = combine_order(schedule, minibatch_rows) if early_combine and not fuse_top1 else (None, None)
    return Sm90Launch(
        schedule=schedule, tokens_per_rank=tokens_per_rank, top_k=top_k, minibatch_rows=minibatch_rows,
        fuse_top1=bool(fuse_top1), x=x, weights=weights, out=out,
        x_ptrs=workspace.rank_pointer_table(x.view(ep_size, tokens_per_rank, x.shape[1])),
        weight_ptrs=workspace.rank_pointer_table(weights.view(ep_size, tokens_per_rank * top_k)),
        combine_ptrs=out_ptrs if fuse_top1 else None, out_ptrs=out_ptrs,
        w_gate=w_gate.detach().contiguous(), w_up=w_up.detach().contiguous(), w_down=w_down.detach().contiguous(),
        workspace=workspace, x_row_bytes=x.shape[1] * x.element_size(), mxfp8=mxfp8, combine_tokens=order[0],
        combine_offsets=order[1])


def resolve_down_path(prep: "Sm90Launch", dispatch: str, down_tma: bool | None = None,
                      down_span: int | str | None = None, sum_kernel: bool | None = None,
                      early_combine: bool = False, store_warps: bool | None = None) -> tuple[bool, int, bool]:
    """``(down_tma, down_span, sum_kernel)`` of a launch of ``prep`` in ``dispatch`` mode ("ring" or "gather", already
    resolved), from :func:`launch`'s arguments of those names (``None``: the defaults), whether it runs the early
    combine, and its ``store_warps`` argument: how its down tiles leave (:func:`resolve_down_tma`), how many column
    blocks a down task spans (:func:`resolve_down_span`, which depends on the first) and where the weighted sum runs
    (:func:`resolve_sum_kernel`). Asking for the store warps (``store_warps=True``) in ring mode keeps the push they
    work for, unless down_tma is asked for too (an error in :func:`launch`). The tests and the timeline read the
    launch's choices here."""
    ws = prep.workspace
    y_fits = down_tma_y_fits(ws.key.capacity, ws.key.num_ranks, prep.tokens_per_rank, prep.top_k)
    sum_allowed = sum_kernel_allowed(prep, early_combine)
    if down_tma is None and store_warps and dispatch == "ring":
        down_tma = False
    use_down_tma = resolve_down_tma(down_tma, down_tma_allowed(prep), dispatch, y_fits,
                                    ring_sums_by_kernel=resolve_sum_kernel(sum_kernel, sum_allowed, True))
    span = resolve_down_span(down_span, dispatch, prep.w_gate.shape[2], prep.w_gate.shape[1], use_down_tma)
    use_sum_kernel = resolve_sum_kernel(sum_kernel, sum_allowed, use_down_tma)
    return use_down_tma, span, use_sum_kernel


_NO_TENSOR = torch.empty(0)  # the binding's "no saved_gate_up" (never dereferenced)
_NO_INT_TENSOR = torch.empty(0, dtype=torch.int32)  # the binding's "no early-combine order"
_NO_LONG_TENSOR = torch.empty(0, dtype=torch.int64)  # the binding's "no task timeline"


def launch(prep: Sm90Launch, *, variant: str | None = None, num_ctas: int = 0, timeout_s: float | None = None,
           ablate: int = 0, dispatch: str | None = None, gather_prefetch: int | None = None,
           saved_gate_up: torch.Tensor | None = None, gather_row_prefetch: bool | None = None,
           signal_warp: bool | None = None, store_warps: bool | None = None, early_combine: bool | None = None,
           skip_padding_half: bool | None = None, trace: torch.Tensor | None = None,
           down_span: int | None = None, overlap_steps: bool | None = None, down_tma: bool | None = None,
           down_ping_pong: bool | None = None, first_dispatch_parts: int | str | None = None,
           sum_kernel: bool | None = None, clusters: bool | None = None, spread_dispatch: bool | None = None,
           extension=None) -> torch.Tensor:
    """Enqueue the reset and the megakernel on the current stream; returns ``prep.out`` (not yet ready).

    Never synchronises, so it can be captured in a CUDA graph. ``num_ctas`` = 0 launches one CTA per SM;
    fewer is allowed (the static task order cannot deadlock), which tests use. ``ablate``: a bitmask of
    :data:`ABLATE` values for timing experiments (the results are then garbage). ``dispatch``: ``"ring"``,
    ``"gather"`` or ``"auto"`` (module docstring; default ``MOK_CUDA_DISPATCH``); ``gather_prefetch``: K blocks
    of L2 prefetch ahead in gather mode (default ``MOK_CUDA_GATHER_PREFETCH``). Neither changes a bit.
    ``saved_gate_up``: a bf16 ``[R * capacity, 2I]`` buffer (``[capacity, 2I]`` for one real rank's launch;
    :func:`saved_gate_up_buffer`) that receives gate | up, rounded to bf16, of every schedule row the kernel computes
    (for the backward), or ``None``.
    ``gather_row_prefetch``, ``signal_warp`` and ``store_warps``: see :func:`default_gather_row_prefetch`,
    :func:`default_signal_warp` and :func:`default_store_warps` (their defaults); none changes a bit.
    ``early_combine``: use the launch's early-combine order (default :func:`default_early_combine`; ``True``
    requires that :func:`prepare` built one); ``False`` runs every weighted sum after the last GEMM. Changes no
    bit. ``skip_padding_half``: see :func:`default_skip_padding_half` (its default); changes no bit.
    ``trace``: an int64 ``[tickets, 7]`` buffer (:func:`trace_buffer`) that receives the task timeline (for each
    ticket: when it was claimed, had its dependencies, reached the consumers and was signalled, which CTA ran which
    kind of task, and for GEMM tasks when the first K block landed and the mainloop ended, in %globaltimer ns:
    :data:`TRACE_FIELDS`, ``include/mok/trace.cuh``; ``experiments/task_timeline.py`` reads it), or ``None``.
    Changes no bit.
    ``down_span``: column blocks of 256 per down task, a divisor of ceil(H / 256) (default: :func:`resolve_down_span`,
    wider in gather mode and with down_tma). With ``down_span > 1`` the store warps default to off (and an explicit
    ``store_warps=True`` is an error). Changes no bit.
    ``overlap_steps``: the task order puts each step's gate/up tasks and the previous step's down tasks in one group,
    tile by tile, so that the CTAs' pushes do not all meet (:func:`resolve_overlap_steps`). Changes no bit.
    ``down_tma``: the down tiles leave by TMA in schedule order (:func:`resolve_down_tma`; default on where y fits).
    The store warps are then off. Changes no bit.
    ``down_ping_pong``: the consumer warpgroups take turns on the down blocks' column halves
    (:func:`resolve_down_ping_pong`; default on where :func:`down_ping_pong_allowed`).
    ``first_dispatch_parts``: tasks per tile of the first minibatch's dispatch (ring mode), so that more CTAs share the
    copy that everything else waits for (:func:`resolve_first_dispatch_parts`). Changes no bit.
    ``sum_kernel``: the weighted sum runs as a second kernel right after the megakernel, which then has no combine
    tasks (:func:`resolve_sum_kernel`; default ``MOK_CUDA_SUM_KERNEL``: with down_tma). Changes no bit.
    ``clusters``: 2-CTA clusters that load each pair of gate/up row tiles' weight tile once (:func:`resolve_clusters`;
    default ``MOK_CUDA_CLUSTERS``, off). Changes no bit.
    ``spread_dispatch``: the task order places each step's dispatch tasks for the next minibatch among its gate/up
    tasks (:func:`resolve_spread_dispatch`; default ``MOK_CUDA_SPREAD_DISPATCH``, off). Changes no bit.
    ``extension``: another build of the kernel (:func:`mok.cuda.build.load_extension` with ``source_root``) to
    launch instead of the default one, for A/B timing (experiments/ab_kernels.py).
    """
    variant = variant or default_variant()
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    if prep.mxfp8:
        if dispatch == "gather":
            raise ValueError("precision='mxfp8' needs dispatch='ring' (dispatch dequantizes the packed rows)")
        dispatch = "ring"
    dispatch = resolve_dispatch(dispatch, prep.w_gate.shape[1])
    gather_prefetch = default_gather_prefetch() if gather_prefetch is None else gather_prefetch
    if gather_prefetch < 0:
        raise ValueError(f"gather_prefetch must be >= 0, got {gather_prefetch}")
    if ablate < 0 or ablate & ~(ABLATE_ALL | sum(PROBE.values())):
        raise ValueError(f"ablate must be a bitmask of {ABLATE} and {PROBE}, got {ablate}")
    timeout_s = float(os.environ.get("MOK_CUDA_TIMEOUT_S", "10")) if timeout_s is None else timeout_s
    has_order = prep.combine_tokens is not None
    if early_combine and not has_order:
        raise ValueError("early_combine=True needs a launch prepared with the early-combine order (a layer with "
                         "combine tasks, i.e. not the fused top-1 combine; prepare(..., early_combine=True))")
    # The default follows MOK_CUDA_EARLY_COMBINE, not whether the launch happens to carry an order.
    use_order = has_order and (default_early_combine() if early_combine is None else early_combine)
    s, ws = prep.schedule, prep.workspace
    use_down_tma, down_span, use_sum_kernel = resolve_down_path(prep, dispatch, down_tma, down_span, sum_kernel,
                                                                use_order, store_warps)
    first_dispatch_parts = resolve_first_dispatch_parts(first_dispatch_parts)
    explicit_store_warps = store_warps is not None
    if store_warps is None:
        store_warps = default_store_warps() and down_span == 1
    elif store_warps and down_span > 1:
        raise ValueError("store_warps=True needs down_span=1 (the store warps hand off one column block per task)")
    overlap_steps = resolve_overlap_steps(overlap_steps, overlap_steps_allowed(
        ws.key.ring_rows, prep.minibatch_rows, ws.key.capacity, use_order))
    signal_warp = default_signal_warp() if signal_warp is None else bool(signal_warp)
    down_ping_pong = resolve_down_ping_pong(down_ping_pong, down_ping_pong_allowed(
        use_down_tma, variant, signal_warp and variant == "pipelined" and dispatch != "gather", prep.w_gate.shape[1]))
    clusters = resolve_clusters(clusters, clusters_allowed(
        variant, dispatch, signal_warp and variant == "pipelined" and dispatch != "gather", overlap_steps,
        down_ping_pong))
    spread_dispatch = resolve_spread_dispatch(spread_dispatch, spread_dispatch_allowed(
        dispatch, ws.key.ring_rows, prep.minibatch_rows, ws.key.capacity, overlap_steps))
    if use_down_tma:
        if dispatch == "ring" and store_warps and explicit_store_warps:  # (gather mode has neither warp anyway)
            raise ValueError("store_warps=True cannot run with down_tma (the rows leave by TMA: nothing to push)")
        # (the capture query only while buffers are missing; a workspace made in the capture makes its own)
        if (ws.y is None or ws.y_rows is None) and not ws.in_capture and _capturing():
            raise RuntimeError("the first launch with down_tma makes its buffers (y, y_rows): run one eagerly before "
                               "capturing it in a CUDA graph")
        y, y_rows = ws.y_buffer(), ws.y_rows_buffer()  # the kernel writes y_rows (y_rows_table is its reference)
        combine_ptrs = prep.out_ptrs  # never dereferenced: the rows leave into y (no slots are made for them)
    else:
        y, y_rows = _NO_TENSOR, _NO_INT_TENSOR
        if prep.combine_ptrs is None and ws.combine is None and not ws.in_capture and _capturing():
            raise RuntimeError("the first launch that pushes into the combine slots makes them: run one eagerly "
                               "before capturing it in a CUDA graph")
        combine_ptrs = prep.combine_ptrs if prep.combine_ptrs is not None else ws.combine_slot_table()
    (extension or load_extension()).forward(
        s.src_rank, s.src_slot, s.tile_expert, s.segment_offsets,
        prep.x_ptrs, prep.weight_ptrs, combine_ptrs, prep.out_ptrs,
        prep.w_gate, prep.w_up, prep.w_down, ws.ring_x, ws.ring_h, ws.counters, ws.error,
        prep.tokens_per_rank, prep.top_k, prep.minibatch_rows, VARIANTS[variant], num_ctas, timeout_s,
        prep.fuse_top1, ablate, dispatch == "gather", gather_prefetch,
        _NO_TENSOR if saved_gate_up is None else saved_gate_up,
        default_gather_row_prefetch() if gather_row_prefetch is None else bool(gather_row_prefetch),
        signal_warp, prep.mxfp8, prep.x_row_bytes,
        prep.local_rank, prep.phases, bool(store_warps),
        prep.combine_tokens if use_order else _NO_INT_TENSOR, prep.combine_offsets if use_order else _NO_INT_TENSOR,
        default_skip_padding_half() if skip_padding_half is None else bool(skip_padding_half),
        _NO_LONG_TENSOR if trace is None else trace, down_span, overlap_steps, y, y_rows, down_ping_pong,
        first_dispatch_parts, use_sum_kernel, clusters, spread_dispatch)
    return prep.out


# The task timeline's columns (include/mok/trace.cuh, TraceField): %globaltimer ns, except "who" (blockIdx.x << 8 |
# kind); "data_in" and "mainloop_done" only for GEMM tasks (-1 for the others).
TRACE_FIELDS = ("claimed", "ready", "start", "done", "who", "data_in", "mainloop_done")
TASK_KINDS = {1: "dispatch", 2: "gate_up", 3: "down", 4: "combine"}  # TaskKind (workspace.cuh)
SCHEDULE_PHASES = 5  # TaskPhase's kNumPhases (scheduler.cuh): the groups of one step, per rank


def trace_buffer(prep: Sm90Launch) -> torch.Tensor:
    """An int64 ``[tickets, len(TRACE_FIELDS)]`` buffer for :func:`launch`'s ``trace``, filled with -1 (a ticket the
    kernel never ran keeps it, and so do a non-GEMM task's mainloop marks). ``tickets`` is the task count of a ring-mode
    launch of these sizes with the first minibatch's dispatch in the most parts, the kernel's own count
    (:func:`mok.cuda.workspace.launch_tickets`; gather mode has fewer tasks: no dispatches, and so has a launch with
    fewer parts), plus the padding tickets of a launch in clusters (at most one per group of the order: per step, phase
    and rank; never recorded), so it bounds every launch of ``prep``."""
    s = prep.schedule
    intermediate, hidden = prep.w_gate.shape[1], prep.w_gate.shape[2]
    combine_blocks = 0 if prep.fuse_top1 else -(-prep.tokens_per_rank // COMBINE_BLOCK_TOKENS)
    tickets = launch_tickets(s.ep_size, s.capacity, hidden, intermediate, True, combine_blocks,
                             first_dispatch_parts=MAX_FIRST_DISPATCH_PARTS,
                             minibatch_tiles=prep.minibatch_rows // BLOCK_M)
    steps = -(-s.capacity // prep.minibatch_rows) + 1  # (overlapped steps walk one more; never with clusters)
    tickets += steps * SCHEDULE_PHASES * s.ep_size
    return torch.full((tickets, len(TRACE_FIELDS)), -1, dtype=torch.int64, device=prep.out.device)


def saved_gate_up_buffer(prep: Sm90Launch, poison: bool = False) -> torch.Tensor:
    """A bf16 ``[R * capacity, 2I]`` buffer for :func:`launch`'s ``saved_gate_up``: row ``r * capacity + i`` is
    schedule row i of rank r, columns gate then up (one real rank's launch, ``prep.local_rank >= 0``: that rank's
    rows only, ``[capacity, 2I]``). Rows past a rank's rows in use are never written (the Triton backward never
    reads them); ``poison`` NaN-fills it first (tests)."""
    ranks, capacity = prep.schedule.src_rank.shape
    if prep.local_rank >= 0:
        ranks = 1
    rows = torch.empty(ranks * capacity, 2 * prep.w_gate.shape[1], dtype=torch.bfloat16, device=prep.out.device)
    return rows.fill_(float("nan")) if poison else rows


def start_error_checks(check: bool | str | None = None) -> str:
    """The error-check mode of launches about to be queued: ``check`` as :func:`sm90_forward` takes it (default
    ``MOK_CUDA_CHECK``), ``"off"`` while a CUDA graph is being captured. Unless off, first reports an earlier
    launch's error that the deferred check has read back meanwhile (no waiting)."""
    mode = check_mode() if check is None else ("sync" if check is True else "off" if check is False else check)
    if mode == "off" or _capturing():
        return "off"
    check_pending_errors(wait=False)  # report an earlier launch's error before queueing more work
    return mode


def finish_error_check(prep: Sm90Launch, mode: str) -> None:
    """After ``prep``'s launch: read its error record now (``"sync"``; raises, synchronises), queue the read
    (``"deferred"``) or nothing (``"off"``); ``mode`` from :func:`start_error_checks`."""
    if mode == "sync":
        check_error(prep)
    elif mode == "deferred":
        defer_error_check(prep)


def check_error(prep: Sm90Launch) -> None:
    """Raise :class:`Sm90KernelError` if the launch recorded an error (synchronises with the device)."""
    raise_if_error(prep.workspace.error.tolist())


def defer_error_check(prep: Sm90Launch) -> None:
    """Queue an asynchronous read of the launch's error record (see :func:`check_pending_errors`)."""
    DEFERRED.record(prep.workspace.error)


def check_pending_errors(wait: bool = True) -> None:
    """Read the error records of earlier launches queued by the deferred check; raise for the first error.

    ``wait=True`` waits for every queued record (synchronises); ``wait=False`` reads only those already
    landed (what every forward call does first).
    """
    DEFERRED.poll(wait=wait)


def sm90_forward(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1,
                 config: MoKConfig | None = None, variant: str | None = None, num_ctas: int = 0,
                 check: bool | str | None = None, poison: bool = False, fuse_top1: bool | None = None,
                 reuse_workspace: bool = True, dispatch: str | None = None, save_gate_up: bool = False,
                 precision: str = "bf16"):
    """The layer forward through the megakernel (no autograd). Returns ``out`` [T, H] bf16, or ``(out,
    saved_gate_up)`` with ``save_gate_up`` (:func:`saved_gate_up_buffer`: what the backward reads instead of
    recomputing the gate/up GEMM).

    Shapes as in :func:`mok.moe`. ``check``: ``True`` / ``"sync"`` reads the kernel's error record now (raises
    :class:`Sm90KernelError`; synchronises), ``"deferred"`` reads it at a later call, ``False`` / ``"off"``
    never; default ``MOK_CUDA_CHECK``. ``poison`` NaN-fills outputs and intermediates before the launch.
    ``precision``: ``"bf16"`` or ``"mxfp8"`` (module docstring).
    """
    prep, saved = _forward(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size=ep_size, config=config,
                           variant=variant, num_ctas=num_ctas, check=check, poison=poison, fuse_top1=fuse_top1,
                           reuse_workspace=reuse_workspace, dispatch=dispatch, save_gate_up=save_gate_up,
                           precision=precision)
    return (prep.out, saved) if save_gate_up else prep.out


def _forward(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size, config, variant, num_ctas=0, check=None,
             poison=False, fuse_top1=None, reuse_workspace=True, dispatch=None, save_gate_up=False,
             precision="bf16") -> tuple[Sm90Launch, torch.Tensor | None]:
    """:func:`sm90_forward`, returning the launch (its output, schedule tables, ...) and the saved rows."""
    mode = start_error_checks(check)
    prep = prepare(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size=ep_size, config=config, poison=poison,
                   reuse_workspace=reuse_workspace, fuse_top1=fuse_top1, precision=precision,
                   for_backward=save_gate_up)
    saved = saved_gate_up_buffer(prep, poison=poison) if save_gate_up else None
    launch(prep, variant=variant, num_ctas=num_ctas, dispatch=dispatch, saved_gate_up=saved)
    finish_error_check(prep, mode)
    return prep, saved


def triton_layer_gradients(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                           w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, grad_out: torch.Tensor,
                           *, ep_size: int, config: MoKConfig, needs=(True,) * 5,
                           saved_gate_up: torch.Tensor | None = None, precision: str = "bf16",
                           schedule: KernelSchedule | None = None):
    """The layer's gradients from the Triton pipeline's backward, without running its forward.

    Bit for bit what ``mok.moe(..., backend="triton", ep_size=ep_size, config=config)`` followed by
    ``torch.autograd.grad(out, inputs, grad_out)`` returns (the Triton backward reads only x, the routing, the
    weights and ``grad_out``, never the forward's output), but of the forward only the dispatch and the gate/up
    GEMM run again, replayed minibatch by minibatch inside the backward
    (:meth:`mok.triton_ref.pipeline.TritonRanksRun.backward_without_forward`): no down GEMM, combine or
    weighted sum. Plain tensors in, no autograd involved, so it also runs on the CPU under TRITON_INTERPRET=1.
    With ``saved_gate_up`` (the megakernel's gate/up rows, :func:`saved_gate_up_buffer`) the gate/up GEMM does
    not run again either: only the token rows are pulled again, and the gradients are those of the megakernel's
    gate/up values (which differ from the Triton forward's by fp32 summation order; still deterministic and the
    same for every EP degree).

    Args:
        x: ``[T, H]`` tokens; topk_ids: ``[T, K]`` int expert ids; topk_weights: ``[T, K]`` router weights.
        w_gate, w_up: ``[E, I, H]``; w_down: ``[E, H, I]`` (x's dtype).
        grad_out: ``[T, H]`` the gradient of the layer output.
        ep_size, config: as the forward's (ep_size emulated ranks; :class:`MoKConfig`).
        needs: five bools, which of ``(x, topk_weights, w_gate, w_up, w_down)`` want a gradient.
        precision: the Triton pipeline's (``"bf16"`` or ``"mxfp8"``; its MXFP8 backward takes the bf16 weights).
        schedule: the forward's schedule tables for this routing (:class:`KernelSchedule`), which the pipeline
            reads as they are (:class:`mok.schedule.RankTables`) instead of building them again.

    Returns:
        ``(dx [T, H] x's dtype, d_topk_weights [T, K] topk_weights' dtype, d_w_gate, d_w_up [E, I, H],
        d_w_down [E, H, I])``, None where ``needs`` is False (and all None, with nothing run, if none is).
    """
    needs = tuple(bool(n) for n in needs)
    if not any(needs):
        return (None,) * 5
    try:
        get_backend("triton")
    except (RuntimeError, ValueError) as err:
        raise RuntimeError("backend 'cuda' computes its backward through the Triton backend, which is "
                           f"unavailable: {err}") from err
    from ..triton_ref._common import in_dtype  # noqa: PLC0415
    from ..triton_ref.pipeline import TritonLayerRun  # importable now: get_backend imported it

    # As the Triton backend's autograd Function does: contiguous x and dO, the run on x's device, and
    # d_topk_weights (fp32 from the run) in the router weights' dtype; the other gradients are in x's dtype.
    # The inputs go in as they are, not detached (an aten op each): under no_grad nothing records a graph and no
    # gradient returned is a view of an input, as in the Triton backend's Function; so MXFP8's weight cache,
    # keyed by the tensors' identities, also finds the weights of the previous call.
    device = torch.cuda.device(x.device) if x.device.type == "cuda" else contextlib.nullcontext()
    with torch.no_grad(), device:
        run = TritonLayerRun(x.contiguous(), topk_ids, topk_weights, w_gate, w_up, w_down, ep_size, config,
                             precision, backward=True, schedule=schedule)
        dx, d_weights, d_gate, d_up, d_down = run.backward_without_forward(grad_out.contiguous(), saved_gate_up)
        grads = (dx, in_dtype(d_weights, topk_weights.dtype), d_gate, d_up, d_down)
    return tuple(grad if need else None for grad, need in zip(grads, needs))


def save_gate_up_default() -> bool:
    """``MOK_CUDA_SAVE_GATE_UP`` (default on): when a gradient is wanted, the forward keeps gate/up of every row
    (bf16 ``[R * capacity, 2I]``) for the backward instead of the backward running the gate/up GEMM again."""
    return _env_on("MOK_CUDA_SAVE_GATE_UP", "1")


def wants_saved_rows(*inputs: torch.Tensor) -> bool:
    """Whether a forward on these differentiable inputs should save the gate/up rows: a backward may follow
    (:func:`mok.backends.backward_may_follow`) and :func:`save_gate_up_default` is on."""
    return backward_may_follow(*inputs) and save_gate_up_default()


class CudaMoE(torch.autograd.Function):
    """Megakernel forward; the Triton pipeline's backward (:func:`triton_layer_gradients`) on the gate/up rows
    the forward saved (or, with ``MOK_CUDA_SAVE_GATE_UP=0``, recomputed)."""

    @staticmethod
    def forward(ctx, x, topk_weights, w_gate, w_up, w_down, topk_ids, ep_size, config, variant, save_rows,
                precision):
        prep, saved = _forward(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size=ep_size, config=config,
                               variant=variant, save_gate_up=save_rows, precision=precision)
        out = prep.out
        # Through save_for_backward (None is allowed), so that retain_graph, saved-tensor hooks and freeing
        # after the backward treat the rows like any other saved activation.
        ctx.save_for_backward(x, topk_weights, w_gate, w_up, w_down, topk_ids, saved)
        ctx.ep_size = ep_size
        ctx.config = config
        ctx.precision = precision
        # The routing's schedule tables (fresh tensors of this call), so the backward need not build them again.
        ctx.schedule = prep.schedule
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        x, topk_weights, w_gate, w_up, w_down, topk_ids, saved = ctx.saved_tensors
        if not _capturing():
            check_pending_errors(wait=False)
        # The Triton backward on the saved gate/up rows (token rows pulled again), or, without them, replaying
        # dispatch and the gate/up GEMM per minibatch; never the down GEMM, combine or weighted sum.
        grads = triton_layer_gradients(x, topk_ids, topk_weights, w_gate, w_up, w_down, grad_out,
                                       ep_size=ctx.ep_size, config=ctx.config, needs=ctx.needs_input_grad[:5],
                                       saved_gate_up=saved, precision=ctx.precision, schedule=ctx.schedule)
        return (*grads, None, None, None, None, None, None)


def cuda_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1, precision: str = "bf16",
             config: MoKConfig | None = None, variant: str | None = None) -> torch.Tensor:
    """``mok.moe(..., backend="cuda")``: see the module docstring. ``precision``: ``"bf16"`` or ``"mxfp8"``."""
    if precision not in PRECISIONS:
        raise ValueError(f"backend 'cuda' supports precision in {PRECISIONS}, got {precision!r}")
    if not x.is_cuda:
        raise ValueError("backend 'cuda' needs CUDA tensors (a Hopper GPU)")
    save_rows = wants_saved_rows(x, topk_weights, w_gate, w_up, w_down)
    return CudaMoE.apply(x, topk_weights, w_gate, w_up, w_down, topk_ids, ep_size, config or MoKConfig(),
                         variant or default_variant(), save_rows, precision)


register_backend(Backend("cuda", cuda_moe, PRECISIONS,
                         "SM90 persistent megakernel forward (mok/cuda); Triton pipeline backward"))
