"""The schedule table: one table per expert-side rank that drives all four transfers.

MoK routes with one table. Row ``r`` of rank ``d``'s table names the (token, k) pair that the row carries:
``(src_rank[d, r], src_slot[d, r])`` with ``src_slot = local_token * top_k + k``. The same row then drives

===========================  ==========  ===================================================================
transfer                     direction   what moves
===========================  ==========  ===================================================================
forward dispatch             pull        ``x[src_rank][src_slot // top_k]``   -> row ``r`` of the ring
forward combine              push        expert output row ``r``             -> ``slots[src_rank][src_slot]``
backward reverse-combine     pull        ``dO[src_rank][src_slot // top_k]`` (and ``w[src_slot]``) -> row ``r``
backward reverse-dispatch    push        ``dx`` row ``r`` and ``dw``         -> ``slots[src_rank][src_slot]``
===========================  ==========  ===================================================================

Layout of one rank's table (``capacity`` rows)::

    | expert 0 rows ... pad | expert 1 rows ... pad | ... | expert E_local-1 ... pad | unused ... |
    ^ segment_offsets[0]    ^ segment_offsets[1]                                     ^ segment_offsets[-1]

* Each local expert's segment is padded to a multiple of ``tile`` rows, so a GEMM tile of ``tile`` rows never
  spans two experts. Padding rows have ``src_rank = src_slot = -1``.
* Within a segment, rows are in **global token order** (rank-major: rank r owns tokens
  ``[r*T/R, (r+1)*T/R)``). An expert's segment therefore lists the same tokens in the same order for any EP
  degree, which is what makes the per-expert arithmetic (and so every output and gradient) bitwise identical
  across EP 1, 2, 4 and 8.
* Every (token, k) slot appears in exactly one row of one rank: one writer per slot, no float atomics.

The table is built with tensor operations on the device of ``topk_ids``: no Python loop over tokens and, with
the default worst-case capacity, no host synchronisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .checks import check_ep_split


class ScheduleCapacityError(RuntimeError):
    """A rank would receive more rows (padding included) than its schedule capacity; nothing is dropped."""


@dataclass(frozen=True)
class RankTables:
    """One expert-side rank's four tables (views): all that the transfer and GEMM kernels read of a schedule.

    Attributes:
        rank: the expert-side rank that owns this table.
        top_k, tile: the layer's.
        src_rank: ``[capacity]`` int32, source rank of each row; -1 on padding and unused rows.
        src_slot: ``[capacity]`` int32, ``local_token * top_k + k`` on the source rank; -1 on padding.
        segment_offsets: ``[E_local + 1]`` int32, start row of each local expert's padded segment; the last
            entry is the number of rows in use.
        tile_expert: ``[capacity // tile]`` int32, local expert of each tile; -1 for tiles past the last segment.
    """

    rank: int
    top_k: int
    tile: int
    src_rank: torch.Tensor
    src_slot: torch.Tensor
    segment_offsets: torch.Tensor
    tile_expert: torch.Tensor

    @classmethod
    def of(cls, tables: Any, rank: int) -> "RankTables":
        """Rank ``rank``'s view of anything holding the four tables stacked ``[R, ...]`` with ``top_k`` and
        ``tile`` (a :class:`Schedule`, or the megakernel's ``KernelSchedule``, which has no inverse map or
        segment counts and needs none completed for this)."""
        return cls(rank, tables.top_k, tables.tile, tables.src_rank[rank], tables.src_slot[rank],
                   tables.segment_offsets[rank], tables.tile_expert[rank])

    @property
    def capacity(self) -> int:
        return self.src_rank.numel()

    def rows_used(self) -> int:
        """Rows in use, padding included (synchronises with the device)."""
        return int(self.segment_offsets[-1])


@dataclass(frozen=True)
class RankSchedule(RankTables):
    """One expert-side rank's table (views into :class:`Schedule`): its :class:`RankTables` and the real rows
    per local expert.

    Attributes:
        segment_counts: ``[E_local]`` int32, real (unpadded) rows per local expert.
    """

    segment_counts: torch.Tensor

    @property
    def num_local_experts(self) -> int:
        return self.segment_counts.numel()


@dataclass(frozen=True)
class Schedule:
    """The schedule tables of all ``ep_size`` expert-side ranks, stacked along dim 0.

    Besides the expert-side tables (see the module docstring) it keeps the inverse map, from each source
    slot to the row that carries it, which push-based dispatch (the experiments' counterpart to MoK's pull)
    needs: ``dest_rank[s, slot]`` and ``dest_row[s, slot]`` for source rank ``s``.
    """

    ep_size: int
    num_experts: int
    top_k: int
    tokens_per_rank: int
    tile: int
    src_rank: torch.Tensor         # [R, capacity] int32
    src_slot: torch.Tensor         # [R, capacity] int32
    segment_offsets: torch.Tensor  # [R, E_local + 1] int32
    segment_counts: torch.Tensor   # [R, E_local] int32
    tile_expert: torch.Tensor      # [R, capacity // tile] int32
    dest_rank: torch.Tensor        # [R, tokens_per_rank * top_k] int32
    dest_row: torch.Tensor         # [R, tokens_per_rank * top_k] int32

    @property
    def capacity(self) -> int:
        return self.src_rank.shape[1]

    @property
    def num_local_experts(self) -> int:
        return self.num_experts // self.ep_size

    @property
    def slots_per_rank(self) -> int:
        return self.tokens_per_rank * self.top_k

    def rank(self, r: int) -> RankSchedule:
        return RankSchedule(rank=r, top_k=self.top_k, tile=self.tile, src_rank=self.src_rank[r],
                            src_slot=self.src_slot[r], segment_offsets=self.segment_offsets[r],
                            tile_expert=self.tile_expert[r], segment_counts=self.segment_counts[r])

    def ranks(self) -> list[RankSchedule]:
        return [self.rank(r) for r in range(self.ep_size)]

    def rows_used(self) -> list[int]:
        """Rows in use on each rank, padding included (one device synchronisation)."""
        return [int(v) for v in self.segment_offsets[:, -1].tolist()]


def worst_case_capacity(tokens: int, num_experts: int, top_k: int, ep_size: int, tile: int) -> int:
    """Rows one rank can ever need: each token sends at most min(top_k, E_local) rows to a rank, and each
    local expert adds at most ``tile - 1`` rows of padding. Rounded up to a whole tile."""
    local_experts = num_experts // ep_size
    bound = tokens * min(top_k, local_experts) + local_experts * (tile - 1)
    return -(-bound // tile) * tile


def build_schedule(topk_ids: torch.Tensor, num_experts: int, ep_size: int = 1, tile: int = 128,
                   capacity: int | None = None) -> Schedule:
    """Build every rank's schedule table from the routing.

    Args:
        topk_ids: ``[T, top_k]`` integer expert ids (global numbering), no repeats within a row.
        num_experts: E, divisible by ``ep_size``; rank r owns experts ``[r*E/R, (r+1)*E/R)``.
        ep_size: R, the number of (real or emulated) expert-parallel ranks; T must be divisible by R.
        tile: segment padding, a power of two (the GEMM BLOCK_M).
        capacity: rows per rank's table; ``None`` uses :func:`worst_case_capacity` (never overflows,
            no host sync). With an explicit capacity the fill is checked, which synchronises.

    Raises:
        ScheduleCapacityError: a rank needs more rows than ``capacity``.
        ValueError: T or E not divisible by ``ep_size``.
    """
    tokens, top_k = topk_ids.shape
    check_ep_split(tokens, num_experts, ep_size)
    device = topk_ids.device
    local_experts = num_experts // ep_size
    tokens_per_rank = tokens // ep_size
    slots_per_rank = tokens_per_rank * top_k

    # Slot s = token * top_k + k, in global token order. A stable sort by expert id keeps that order within
    # each expert, so every segment lists its tokens ascending, whatever the EP degree.
    expert_of_slot = topk_ids.reshape(-1).to(torch.int64)
    slots_by_expert = torch.sort(expert_of_slot, stable=True).indices
    expert_sorted = expert_of_slot[slots_by_expert]

    # NOTE: not torch.bincount, whose output size depends on the data and so reads it back to the host on CUDA.
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device).scatter_add_(
        0, expert_of_slot, torch.ones_like(expert_of_slot))
    padded = (counts + tile - 1) // tile * tile
    segment_offsets = torch.zeros(ep_size, local_experts + 1, dtype=torch.int64, device=device)
    segment_offsets[:, 1:] = padded.view(ep_size, local_experts).cumsum(1)

    if capacity is None:
        capacity = worst_case_capacity(tokens, num_experts, top_k, ep_size, tile)
    else:
        needed = int(segment_offsets[:, -1].max())
        if needed > capacity:
            worst = int(segment_offsets[:, -1].argmax())
            raise ScheduleCapacityError(
                f"rank {worst} needs {needed} schedule rows (padding included) but the capacity is "
                f"{capacity}; raise MoKConfig.capacity_rows (tokens are never dropped)")

    # Row of each slot inside its expert-side rank's table: segment start + rank within the expert.
    unpadded_start = counts.cumsum(0) - counts
    position = torch.arange(expert_sorted.numel(), device=device) - unpadded_start[expert_sorted]
    owner = expert_sorted // local_experts
    row = segment_offsets[owner, expert_sorted % local_experts] + position

    src_rank = torch.full((ep_size, capacity), -1, dtype=torch.int32, device=device)
    src_slot = torch.full((ep_size, capacity), -1, dtype=torch.int32, device=device)
    src_rank[owner, row] = (slots_by_expert // slots_per_rank).to(torch.int32)
    src_slot[owner, row] = (slots_by_expert % slots_per_rank).to(torch.int32)

    dest_rank = torch.empty(tokens * top_k, dtype=torch.int32, device=device)
    dest_row = torch.empty(tokens * top_k, dtype=torch.int32, device=device)
    dest_rank[slots_by_expert] = owner.to(torch.int32)
    dest_row[slots_by_expert] = row.to(torch.int32)

    # Local expert of each tile: the segment whose end lies beyond the tile's first row.
    tile_starts = torch.arange(0, capacity, tile, device=device).expand(ep_size, -1).contiguous()
    tile_expert = torch.searchsorted(segment_offsets[:, 1:].contiguous(), tile_starts, right=True)
    tile_expert = torch.where(tile_starts < segment_offsets[:, -1:], tile_expert, -1).to(torch.int32)

    return Schedule(ep_size, num_experts, top_k, tokens_per_rank, tile, src_rank, src_slot,
                    segment_offsets.to(torch.int32), counts.view(ep_size, local_experts).to(torch.int32),
                    tile_expert, dest_rank.view(ep_size, slots_per_rank),
                    dest_row.view(ep_size, slots_per_rank))
