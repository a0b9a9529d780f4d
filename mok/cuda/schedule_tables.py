"""The four schedule tables the megakernel reads, built without a host synchronisation.

The megakernel needs only ``src_rank``, ``src_slot``, ``segment_offsets`` and ``tile_expert`` of
:class:`mok.schedule.Schedule` (not the inverse map ``dest_rank`` / ``dest_row``, which only push-based dispatch
uses). :func:`build_kernel_schedule` computes exactly those tables, bit for bit what
:func:`mok.schedule.build_schedule` computes (tests/test_cuda_compile.py checks it on many routings), with two
differences that matter for the layer's latency:

* **no host synchronisation**: ``torch.bincount`` on a CUDA tensor reads the largest id back to the host to size
  its output, which stalls the CPU until every kernel queued before it (the previous layer's megakernel
  included) has finished. The per-expert counts here come from a ``searchsorted`` of the already sorted ids
  instead, so the host can queue the next layer's work while the GPU is still busy;
* fewer kernels: no inverse map, the sort runs on int32 keys (half the radix passes of int64), and on a GPU
  everything after the sort is two small kernels of the extension (csrc/schedule_tables.cu: run starts and
  padded offsets in one CTA, then one thread per table row) instead of about twenty PyTorch operations, each a
  launch on the layer's critical path. The PyTorch formulation below is the same computation (and what runs
  on a CPU); both are checked against ``build_schedule``.

With an explicit ``capacity`` the fill must be checked (tokens are never dropped), which needs the host to read
the row counts; that case is delegated to :func:`mok.schedule.build_schedule`, which raises
:class:`mok.schedule.ScheduleCapacityError`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..schedule import Schedule, build_schedule, worst_case_capacity


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

    @property
    def capacity(self) -> int:
        return self.src_rank.shape[1]

    @classmethod
    def from_schedule(cls, schedule: Schedule) -> "KernelSchedule":
        """The kernel's view of a full :class:`mok.schedule.Schedule` (no copies)."""
        return cls(schedule.ep_size, schedule.num_experts, schedule.top_k, schedule.tokens_per_rank,
                   schedule.tile, schedule.src_rank, schedule.src_slot, schedule.segment_offsets,
                   schedule.tile_expert)


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
        device_kernels: build the tables after the sort with the extension's kernels (default: on CUDA
            tensors) or with PyTorch operations (``False``; the only choice on a CPU).
    """
    if capacity is not None:
        return KernelSchedule.from_schedule(build_schedule(topk_ids, num_experts, ep_size, tile, capacity))
    tokens, top_k = topk_ids.shape
    device = topk_ids.device
    local_experts = num_experts // ep_size
    tokens_per_rank = tokens // ep_size
    slots_per_rank = tokens_per_rank * top_k
    capacity = worst_case_capacity(tokens, num_experts, top_k, ep_size, tile)

    # Slots in global token order, stably sorted by expert: every segment lists its tokens ascending.
    expert_sorted, slots_by_expert = torch.sort(topk_ids.reshape(-1).to(torch.int32), stable=True)
    if device_kernels is None:
        device_kernels = topk_ids.is_cuda
    if device_kernels:
        from .build import load_extension  # noqa: PLC0415 (the extension is built on first use)

        src_rank, src_slot, segment_offsets, tile_expert = load_extension().schedule_tables(
            expert_sorted, slots_by_expert, num_experts, ep_size, tile, capacity, slots_per_rank)
        return KernelSchedule(ep_size, num_experts, top_k, tokens_per_rank, tile, src_rank, src_slot,
                              segment_offsets, tile_expert)

    # Where each expert's run starts in the sorted order (= slots routed to smaller ids); the difference of
    # consecutive starts is bincount's result, without its host read-back.
    run_start = torch.searchsorted(expert_sorted,
                                   torch.arange(num_experts + 1, dtype=torch.int32, device=device))
    padded = (run_start[1:] - run_start[:-1] + (tile - 1)) // tile * tile
    segment_offsets = torch.zeros(ep_size, local_experts + 1, dtype=torch.int64, device=device)
    segment_offsets[:, 1:] = padded.view(ep_size, local_experts).cumsum(1)

    # Row of each slot in its expert-side rank's table: the segment start + its place within the expert. In
    # the flattened [R, E/R + 1] offsets, expert e = owner * E/R + local sits at index e + owner.
    expert = expert_sorted.to(torch.int64)
    owner = expert // local_experts
    row = segment_offsets.view(-1)[expert + owner] + (torch.arange(expert.numel(), device=device) - run_start[expert])
    flat_row = owner * capacity + row

    src_rank = torch.full((ep_size * capacity,), -1, dtype=torch.int32, device=device)
    src_slot = torch.full((ep_size * capacity,), -1, dtype=torch.int32, device=device)
    src_rank[flat_row] = (slots_by_expert // slots_per_rank).to(torch.int32)
    src_slot[flat_row] = (slots_by_expert % slots_per_rank).to(torch.int32)

    # Local expert of each tile: the segment whose end lies beyond the tile's first row; -1 past the last one.
    tile_starts = torch.arange(0, capacity, tile, device=device).expand(ep_size, -1).contiguous()
    segment_ends = segment_offsets[:, 1:].contiguous()
    tile_expert = torch.searchsorted(segment_ends, tile_starts, right=True)
    tile_expert = torch.where(tile_starts < segment_ends[:, -1:], tile_expert, -1).to(torch.int32)

    return KernelSchedule(ep_size, num_experts, top_k, tokens_per_rank, tile,
                          src_rank.view(ep_size, capacity), src_slot.view(ep_size, capacity),
                          segment_offsets.to(torch.int32), tile_expert)
