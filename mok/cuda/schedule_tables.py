"""The four schedule tables the megakernel reads, built by two small kernels of the extension.

The megakernel needs only ``src_rank``, ``src_slot``, ``segment_offsets`` and ``tile_expert`` of
:class:`mok.schedule.Schedule` (not the inverse map ``dest_rank`` / ``dest_row``, which only push-based dispatch
uses). On CUDA tensors :func:`build_kernel_schedule` computes exactly those tables, bit for bit what
:func:`mok.schedule.build_schedule` computes (tests compare them), as a stable sort of the ids (:func:`sort_by_expert`:
a counting sort of two kernels up to 2**20 slots over 1,024 experts, ``torch.sort`` on 16-bit keys past them)
followed by two kernels (csrc/schedule_tables.cu: run starts and padded offsets in one CTA, then one thread per table
row). Neither builder synchronises with the host; this one exists because it is cheaper on the layer's critical path: on
the H200 (experiments/results/cuda_breakdown_20261129-102241.json) it took 0.06-0.09 ms of device time (CUDA graph) and
0.08-0.14 ms per eager call, against 0.11-0.15 ms (graph) for the same tables from about twenty PyTorch operations
(build_schedule's computation without the inverse map) and 0.53-1.0 ms per eager call of ``build_schedule``.

The backward (the Triton pipeline's) reads these four tables as they are (:class:`mok.schedule.RankTables`).
Where the whole :class:`mok.schedule.Schedule` is wanted, :meth:`KernelSchedule.full_schedule`
completes them with a few scatters and gathers instead of building them again (no sort, no host
synchronisation; bit for bit ``build_schedule``'s, tested).

Everywhere else (CPU tensors, ``device_kernels=False``, or an explicit ``capacity``, whose fill must be checked
on the host and raises :class:`mok.schedule.ScheduleCapacityError`) the tables come from
:func:`mok.schedule.build_schedule` itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..schedule import Schedule, build_schedule, worst_case_capacity

COMBINE_BLOCK_TOKENS = 16  # tokens per combine task: Sm90Tiles::kCombineTokens (include/mok/workspace.cuh)
EXPERT_SORT_MAX_SLOTS = 1048576   # kExpertSortMaxSlots (include/mok/launch.cuh): the counting sort's limit
EXPERT_SORT_MAX_EXPERTS = 1024   # kExpertSortMaxExperts: its per-warp counts in shared memory
EXPERT_SORT_SLOTS_PER_CTA = 4096  # kExpertSortSlotsPerCta
# Each of the sort's G = ceil(N / 4096) CTAs reads all G x E CTA counts, G**2 * E in all. auto takes the counting sort
# up to the most of that measured against torch's sort: anchor-2 (G = 128, E = 256; 36.4 us against 41.4, round 24);
# the limits' corner (G = 256, E = 1,024) is 16 times that and has not been timed.
EXPERT_SORT_AUTO_MAX_COUNT_READS = 128 * 128 * 256


@dataclass
class KernelSchedule:
    """Every rank's schedule table as the megakernel reads it (R ranks, C = capacity rows per rank).

    Attributes:
        ep_size, num_experts, top_k, tokens_per_rank, tile: sizes (host ints).
        src_rank: ``[R, C]`` int32, source rank of each row; -1 on padding and unused rows.
        src_slot: ``[R, C]`` int32, ``local_token * top_k + k`` on the source rank; -1 on padding.
        segment_offsets: ``[R, E/R + 1]`` int32, start row of each local expert's padded segment; the last
            entry is the number of rows in use.
        tile_expert: ``[R, C / tile]`` int32, local expert of each tile; -1 past the last segment.
        source: the full :class:`mok.schedule.Schedule` these tables were taken from, if any.
    """

    ep_size: int
    num_experts: int
    top_k: int
    tokens_per_rank: int
    tile: int
    src_rank: torch.Tensor
    src_slot: torch.Tensor
    segment_offsets: torch.Tensor
    tile_expert: torch.Tensor
    source: Schedule | None = None

    @property
    def capacity(self) -> int:
        return self.src_rank.shape[1]

    def padding_half_tiles(self) -> tuple[int, int]:
        """(tiles in use, those whose second half of rows is all padding), over every rank: the GEMM tiles whose
        second consumer warpgroup skips its MMA in the megakernel (``Task::padding_half``). A segment's padding
        trails its real rows, so the first row of the second half tells. Reads the tables on the host (tests and
        experiments only)."""
        rows_used = self.segment_offsets[:, -1].tolist()
        half = self.tile // 2
        tiles = sum((rows + self.tile - 1) // self.tile for rows in rows_used)
        halves = sum(int((self.src_rank[r, half:rows:self.tile] < 0).sum()) for r, rows in enumerate(rows_used))
        return tiles, halves

    def full_schedule(self) -> Schedule:
        """The whole :class:`mok.schedule.Schedule` of this routing (what the Triton pipeline reads), completed
        from these tables on the device: ``segment_counts`` counts each segment's real rows, and the inverse map
        sends every real row's source slot back to (rank, row). No sort and no host synchronisation."""
        if self.source is not None:
            return self.source
        ranks, capacity = self.src_rank.shape
        slots_per_rank = self.tokens_per_rank * self.top_k
        device = self.src_rank.device
        real = self.src_rank >= 0
        # Real rows before each row (exclusive prefix sum), read at the segment boundaries.
        before = torch.zeros(ranks, capacity + 1, dtype=torch.int32, device=device)
        before[:, 1:] = real.to(torch.int32).cumsum(1)
        at_bounds = before.gather(1, self.segment_offsets.to(torch.int64))
        segment_counts = (at_bounds[:, 1:] - at_bounds[:, :-1]).to(torch.int32)
        # Inverse map: each real row is the one row carrying its source slot; padding rows write to a spare
        # element past the end (scatter, not boolean indexing, so nothing waits for the device).
        total = ranks * slots_per_rank
        target = torch.where(real, self.src_rank.to(torch.int64) * slots_per_rank + self.src_slot.to(torch.int64),
                             total).reshape(-1)
        row_ids = torch.arange(capacity, dtype=torch.int32, device=device).expand(ranks, capacity).reshape(-1)
        rank_ids = torch.arange(ranks, dtype=torch.int32, device=device).repeat_interleave(capacity)
        dest_rank = torch.empty(total + 1, dtype=torch.int32, device=device).scatter_(0, target, rank_ids)
        dest_row = torch.empty(total + 1, dtype=torch.int32, device=device).scatter_(0, target, row_ids)
        return Schedule(self.ep_size, self.num_experts, self.top_k, self.tokens_per_rank, self.tile, self.src_rank,
                        self.src_slot, self.segment_offsets, segment_counts, self.tile_expert,
                        dest_rank[:total].view(ranks, slots_per_rank), dest_row[:total].view(ranks, slots_per_rank))

    @classmethod
    def from_schedule(cls, schedule: Schedule) -> "KernelSchedule":
        """The kernel's view of a full :class:`mok.schedule.Schedule` (no copies)."""
        return cls(schedule.ep_size, schedule.num_experts, schedule.top_k, schedule.tokens_per_rank,
                   schedule.tile, schedule.src_rank, schedule.src_slot, schedule.segment_offsets,
                   schedule.tile_expert, schedule)


def sort_by_expert(ids: torch.Tensor, num_experts: int, *,
                   method: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(expert_sorted, slots_by_expert)``, int32 and int64: the slots ``ids`` (expert ids in ``[0, num_experts)``)
    stably sorted by expert, what ``torch.sort(ids, stable=True)`` returns. ``method`` (default
    ``MOK_CUDA_SCHEDULE_SORT``, else ``auto``): ``auto`` sorts a 1-D CUDA tensor of up to
    :data:`EXPERT_SORT_MAX_SLOTS` slots over up to :data:`EXPERT_SORT_MAX_EXPERTS` experts with the extension's
    counting sort (two kernels) where its cost was measured lower (:func:`counting_sort_measured`), and
    anything else with ``torch.sort`` on 16-bit keys where they fit (E <= 32767: a radix sort makes one pass per 8 bits
    of key; round 22: 0.71-0.80x the 32-bit sort's GPU time, experiments/schedule_sort_bench.py); ``torch`` always the
    latter; ``counting`` always the former (an error past its limits). All give the same order for ids in ``[0, E)``
    (the counting sort clamps others into the range; the tables of such routing are not defined)."""
    expert_sorted, slots_by_expert, _ = _sort_with_runs(ids, num_experts, method)
    return expert_sorted, slots_by_expert


def _sort_with_runs(ids: torch.Tensor, num_experts: int,
                    method: str | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`sort_by_expert`, plus each expert's first sorted index ``[E + 1]`` int32 where the counting sort ran
    (it has them anyway; the table kernels would otherwise search for them), else ``None``."""
    choice = os.environ.get("MOK_CUDA_SCHEDULE_SORT", "auto") if method is None else method
    if choice not in ("auto", "torch", "counting"):
        raise ValueError(f"the schedule's sort (method or MOK_CUDA_SCHEDULE_SORT) must be 'auto', 'torch' or "
                         f"'counting', got {choice!r}")
    fits = ids.is_cuda and ids.dim() == 1 and counting_sort_fits(ids.numel(), num_experts)
    if choice == "counting" and not fits:
        raise ValueError(f"the schedule's sort 'counting' sorts a 1-D CUDA tensor of 1 to {EXPERT_SORT_MAX_SLOTS} slots "
                         f"over 1 to {EXPERT_SORT_MAX_EXPERTS} experts, got shape {tuple(ids.shape)} on {ids.device} "
                         f"and {num_experts}")
    if choice == "counting" or (choice == "auto" and fits and counting_sort_measured(ids.numel(), num_experts)):
        from .build import load_extension  # noqa: PLC0415 (the extension is built on first use)
        expert_sorted, slots_by_expert, run_start = load_extension().expert_sort(ids.to(torch.int32).contiguous(),
                                                                                 num_experts)
        return expert_sorted, slots_by_expert, run_start
    key_dtype = torch.int16 if num_experts <= torch.iinfo(torch.int16).max else torch.int32
    expert_sorted, slots_by_expert = torch.sort(ids.to(key_dtype), stable=True)
    return expert_sorted.to(torch.int32), slots_by_expert, None


def counting_sort_fits(num_slots: int, num_experts: int) -> bool:
    """Whether the counting sort takes these sizes at all (its kernels' limits)."""
    return 1 <= num_slots <= EXPERT_SORT_MAX_SLOTS and 1 <= num_experts <= EXPERT_SORT_MAX_EXPERTS


def counting_sort_measured(num_slots: int, num_experts: int) -> bool:
    """Whether ``auto`` takes the counting sort: its CTAs' reads of the CTA counts within what was measured faster
    than torch's sort (:data:`EXPERT_SORT_AUTO_MAX_COUNT_READS`)."""
    ctas = -(-num_slots // EXPERT_SORT_SLOTS_PER_CTA)
    return ctas * ctas * num_experts <= EXPERT_SORT_AUTO_MAX_COUNT_READS


def build_kernel_schedule(topk_ids: torch.Tensor, num_experts: int, ep_size: int = 1, tile: int = 128,
                          capacity: int | None = None, device_kernels: bool | None = None) -> KernelSchedule:
    """The megakernel's schedule tables (see the module docstring); equal to ``build_schedule``'s.

    Args:
        topk_ids: ``[T, K]`` int32/int64 expert ids in ``[0, E)`` (global numbering), no repeats in a row.
        num_experts: E, divisible by ``ep_size``.
        ep_size: R emulated (or real) expert-parallel ranks; T divisible by R.
        tile: segment padding (the kernel's BLOCK_M, 128).
        capacity: ``None`` (worst case: never overflows, no host synchronisation), or explicit rows per rank
            (checked on the host through :func:`mok.schedule.build_schedule`).
        device_kernels: build the tables with the extension's kernels (default: on CUDA tensors) or through
            :func:`mok.schedule.build_schedule` (``False``; the only choice on a CPU).
    """
    if device_kernels is None:
        device_kernels = topk_ids.is_cuda
    if capacity is not None or not device_kernels:
        return KernelSchedule.from_schedule(build_schedule(topk_ids, num_experts, ep_size, tile, capacity))
    from .build import load_extension  # noqa: PLC0415 (the extension is built on first use)

    tokens, top_k = topk_ids.shape
    tokens_per_rank = tokens // ep_size
    capacity = worst_case_capacity(tokens, num_experts, top_k, ep_size, tile)
    # Slots in global token order, stably sorted by expert: every segment lists its tokens ascending.
    expert_sorted, slots_by_expert, run_start = _sort_with_runs(topk_ids.reshape(-1), num_experts, None)
    src_rank, src_slot, segment_offsets, tile_expert = load_extension().schedule_tables(
        expert_sorted, slots_by_expert, num_experts, ep_size, tile, capacity, tokens_per_rank * top_k, run_start)
    return KernelSchedule(ep_size, num_experts, top_k, tokens_per_rank, tile, src_rank, src_slot,
                          segment_offsets, tile_expert)


def combine_order(schedule: KernelSchedule, minibatch_rows: int,
                  block_tokens: int = COMBINE_BLOCK_TOKENS) -> tuple[torch.Tensor, torch.Tensor]:
    """Early combine: every rank's tokens in the order their weighted sums can run, and where each block of them
    is placed in the megakernel's task order (include/mok/scheduler.cuh).

    A token of rank q is *ready* after step m, the last ring minibatch (step) that holds one of its K rows in any
    rank's table (row i of a table is in step ``i // minibatch_rows``). Every rank's tokens are sorted by
    (ready step, token) and cut into blocks of ``block_tokens``; a block is ready when its last token is, and a
    block ready after step m is placed in step m + 1, or in the last step (the kernel's ``num_steps - 1``, from
    each rank's rows in use) if m + 1 is past it. Device tensors in, device tensors out, no host synchronisation;
    every step is deterministic (integer scatter-max and -add, a sort on distinct keys).

    Args:
        schedule: the launch's tables (``src_rank``, ``src_slot`` ``[R, C]``, ``segment_offsets``).
        minibatch_rows: the ring minibatch the kernel walks (a multiple of the tile).
        block_tokens: tokens per combine task (the kernel's ``Sm90Tiles::kCombineTokens``).

    Returns:
        ``tokens`` ``[R, T_local]`` int32, each rank's tokens sorted by ready step (ties by token): block b is
        ``tokens[q, b * block_tokens:(b + 1) * block_tokens]``; and ``offsets`` ``[R, ceil(C / minibatch_rows) + 1]``
        int32: the blocks placed in step s are ``offsets[q, s]:offsets[q, s + 1]``; ``offsets[q, -1]`` is the
        number of blocks, ``ceil(T_local / block_tokens)``.
    """
    ranks, capacity = schedule.src_rank.shape
    tokens_per_rank, top_k = schedule.tokens_per_rank, schedule.top_k
    if minibatch_rows <= 0 or minibatch_rows % schedule.tile:
        raise ValueError(f"minibatch_rows must be a positive multiple of the tile ({schedule.tile}), got "
                         f"{minibatch_rows}")
    steps = -(-capacity // minibatch_rows)
    device = schedule.src_rank.device
    real = schedule.src_rank >= 0
    # Each row's step, scattered (max) onto the token it came from; padding rows go to a spare entry at the end.
    row_step = (torch.arange(capacity, device=device, dtype=torch.int32) // minibatch_rows).expand(ranks, capacity)
    owner = torch.where(real, schedule.src_rank.to(torch.int64) * tokens_per_rank
                        + torch.div(schedule.src_slot, top_k, rounding_mode="floor").to(torch.int64),
                        ranks * tokens_per_rank)
    ready = torch.zeros(ranks * tokens_per_rank + 1, dtype=torch.int32, device=device)
    ready.scatter_reduce_(0, owner.reshape(-1), row_step.reshape(-1), reduce="amax")
    ready = ready[:-1].view(ranks, tokens_per_rank)
    token_ids = torch.arange(tokens_per_rank, device=device, dtype=torch.int64)
    order = torch.argsort(ready.to(torch.int64) * tokens_per_rank + token_ids, dim=1)  # distinct keys
    # A block is ready with its last token; it is placed one step later, at most in the kernel's last step.
    last_of_block = torch.clamp(torch.arange(block_tokens - 1, tokens_per_rank + block_tokens - 1, block_tokens,
                                             device=device), max=tokens_per_rank - 1)
    block_ready = ready.gather(1, order[:, last_of_block])
    rows_used = schedule.segment_offsets[:, -1].to(torch.int64)
    last_step = (torch.div(rows_used + minibatch_rows - 1, minibatch_rows, rounding_mode="floor").amax() - 1)
    placed = torch.minimum(block_ready.to(torch.int64) + 1, last_step.clamp(min=0))
    counts = torch.zeros(ranks, steps, dtype=torch.int32, device=device)
    counts.scatter_add_(1, placed, torch.ones_like(placed, dtype=torch.int32))
    offsets = torch.zeros(ranks, steps + 1, dtype=torch.int32, device=device)
    offsets[:, 1:] = counts.cumsum(1)
    return order.to(torch.int32), offsets
