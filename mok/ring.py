"""The ring token buffer: a fixed-size buffer the schedule's rows flow through, one minibatch at a time.

A rank's schedule rows ``[0, rows_used)`` are cut into minibatches of ``minibatch_rows`` (a whole number of
tiles, so a tile never straddles two minibatches). The ring has ``ring_rows // minibatch_rows`` slots; the
forward puts minibatch ``i`` into slot ``i % slots``, overwriting whatever was there, so the memory never grows
with the number of tokens and the CPU never resizes anything. After the forward the ring still holds the last
``slots`` minibatches. The backward walks the minibatches in reverse: those still resident are used as they
are, and only the ones the ring has overwritten are replayed (dispatched and recomputed again).

Every (token, k) row is processed exactly once in each direction, whatever the ring size, and because the
expert arithmetic is done tile by tile the ring size never changes a single bit of the result.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RingPlan:
    """How one rank's ``rows`` schedule rows walk a ring of ``ring_rows`` in minibatches."""

    rows: int
    minibatch_rows: int
    ring_rows: int

    def __post_init__(self) -> None:
        if self.minibatch_rows <= 0 or self.ring_rows < self.minibatch_rows or self.ring_rows % self.minibatch_rows:
            raise ValueError(f"ring_rows ({self.ring_rows}) must be a positive multiple of minibatch_rows "
                             f"({self.minibatch_rows})")

    @property
    def num_minibatches(self) -> int:
        return -(-self.rows // self.minibatch_rows)

    @property
    def num_slots(self) -> int:
        return self.ring_rows // self.minibatch_rows

    def window(self, i: int) -> tuple[int, int]:
        """Schedule rows ``[start, end)`` of minibatch ``i``."""
        start = i * self.minibatch_rows
        return start, min(start + self.minibatch_rows, self.rows)

    def slot(self, i: int) -> int:
        return i % self.num_slots

    def forward_order(self) -> range:
        return range(self.num_minibatches)

    def backward_order(self) -> range:
        return range(self.num_minibatches - 1, -1, -1)

    def resident_after_forward(self, i: int) -> bool:
        """Whether minibatch ``i`` is still in the ring when the backward starts."""
        return i >= self.num_minibatches - self.num_slots


def plan_ring(rows: int, minibatch_rows: int, ring_rows: int | None) -> RingPlan:
    """A plan for ``rows`` rows; ``ring_rows=None`` sizes the ring to hold all of them (no replay)."""
    rows = max(rows, 0)
    if ring_rows is None:
        ring_rows = max(-(-rows // minibatch_rows), 1) * minibatch_rows
    return RingPlan(rows, minibatch_rows, ring_rows)


class RingBuffer:
    """Named per-row tensors of ``ring_rows`` rows, with a record of which minibatch each slot holds.

    ``holds(i)`` answers the backward's question "is minibatch i still here?" from the record itself, so a
    wrong replay decision cannot hide behind arithmetic on the plan.
    """

    def __init__(self, plan: RingPlan, columns: dict[str, tuple[int, torch.dtype]], device: torch.device) -> None:
        self.plan = plan
        self.tensors = {name: torch.empty(plan.ring_rows, width, dtype=dtype, device=device)
                        for name, (width, dtype) in columns.items()}
        self._owner = [-1] * plan.num_slots

    def rows(self, name: str, i: int) -> torch.Tensor:
        """The ring rows that minibatch ``i`` occupies in buffer ``name`` (a view)."""
        start, end = self.plan.window(i)
        base = self.plan.slot(i) * self.plan.minibatch_rows
        rows = self.tensors[name]
        if base == 0 and end - start == rows.shape[0]:  # the whole ring: the tensor itself (a slice costs host time)
            return rows
        return rows[base:base + (end - start)]

    def claim(self, i: int) -> None:
        self._owner[self.plan.slot(i)] = i

    def holds(self, i: int) -> bool:
        return self._owner[self.plan.slot(i)] == i
