"""Push vs pull: one row-transfer kernel whose only switch is the direction, for the push-vs-pull study.

MoK chose a direction per transfer: pull for forward dispatch (the expert's GPU reads token rows from their
source GPU) and push for forward combine (the expert's GPU writes each result into the source's (token, k)
slot). This module makes the other choice available for each transfer so the two can be measured side by side
with everything else equal: the same schedule table, the same tiles, the same bytes.

The one kernel
--------------
Every program owns ``BLOCK_ROWS`` rows of *its own* rank's buffer (``own``) and, for each of them, a table
names one row of a *peer* rank's buffer (``peer``)::

    PULL:  own[me][own_row // OWN_DIV]        <- peer[peer_rank][peer_row // PEER_DIV]      (read remote)
    PUSH:  own[me][own_row // OWN_DIV]        -> peer[peer_rank][peer_row // PEER_DIV]      (write remote)

Rows whose ``peer_rank`` is -1 (schedule padding) are skipped: nothing is read or written for them, so both
directions move exactly the same bytes to exactly the same places. Peer buffers are reached through the
``PeerBuffer.ptr_table`` (each rank's base address), so the same kernel runs on emulated ranks and across GPUs.

Which table drives which transfer (``mok/schedule.py``): the expert side iterates its schedule rows and uses
``(src_rank, src_slot)``; the source side iterates its (token, k) slots and uses the inverse map
``(dest_rank, dest_row)``:

================  =========  ============  ====================  ==============================================
transfer          direction  programs on   table                 what moves
================  =========  ============  ====================  ==============================================
dispatch          pull (MoK) expert side   src_rank, src_slot/K  x[src][token] -> recv[me][row]
dispatch          push       source side   dest_rank, dest_row   x[me][slot/K] -> recv[dest][row]
combine           push (MoK) expert side   src_rank, src_slot    y[me][row]    -> slots[src][slot]
combine           pull       source side   dest_rank, dest_row   y[dest][row]  -> slots[me][slot]
================  =========  ============  ====================  ==============================================

Completion signalling (``SIGNAL``)
----------------------------------
* **Push** needs the receiver to learn when every sender has finished writing into it: each program, after its
  stores (and a CTA barrier), adds the number of rows it delivered to each destination to that destination's
  arrival counter with a *release* atomic; one receiver program per rank spins (*acquire*) until its counter
  reaches the rows it expects. These receiver programs come last in the grid, after every sender.
* **Pull** needs only that the source's buffer is ready: one publisher program per rank sets its ready flag
  (*release*), and each reading program waits (*acquire*) on the flags of the ranks its rows name. Publishers
  come first in the grid. In a real layer the flag is set long before by whatever produced the buffer.
Counters and flags are compared with an epoch that grows every call, so nothing is reset between calls. Every
spin is bounded by ``MAX_SPINS``; a wait that gives up increments a time-out counter that
:meth:`SignalState.check` turns into an error.

``MOVE_DATA=False`` keeps only the signalling: its time is the signalling latency on this machine.

On one GPU the ranks are emulated, so the "link" is HBM and L2: bandwidths here are memory-system numbers, not
NVLink numbers, and the push/pull asymmetry that MoK measured on NVLink lanes cannot show up as such.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch
import triton
import triton.language as tl

from ..comm import PeerBuffer
from ..schedule import Schedule

DIRECTIONS = ("pull", "push")


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


# ----------------------------------------------------------------------------------------------------------
# Device helpers: one per role
# ----------------------------------------------------------------------------------------------------------
@triton.jit
def _publish_ready(ready_ptr, rank, epoch):
    """Pull's only signal: "my buffer is ready for peers to read", a release store of the epoch."""
    tl.atomic_xchg(ready_ptr + rank, epoch, sem="release", scope="gpu")


@triton.jit
def _wait_ready(ready_ptr, timeouts_ptr, peer_rank, real, epoch, MAX_SPINS: tl.constexpr):
    """Spin (acquire) until every rank named by ``peer_rank`` (where ``real``) has published ``epoch``."""
    seen = tl.where(real, tl.atomic_add(ready_ptr + peer_rank, 0, mask=real, sem="acquire", scope="gpu"), epoch)
    spins = 0
    while (tl.min(seen, axis=0) < epoch) & (spins < MAX_SPINS):
        seen = tl.where(real, tl.atomic_add(ready_ptr + peer_rank, 0, mask=real, sem="acquire", scope="gpu"), epoch)
        spins += 1
    if tl.min(seen, axis=0) < epoch:
        tl.atomic_add(timeouts_ptr, 1)


@triton.jit
def _count_arrivals(arrivals_ptr, peer_rank, real, R: tl.constexpr, R_POW2: tl.constexpr):
    """Push's signal: after this program's stores, add the rows it delivered to each destination's counter."""
    ranks = tl.arange(0, R_POW2)
    counts = tl.sum(((peer_rank[:, None] == ranks[None, :]) & real[:, None]).to(tl.int64), axis=0)
    # NOTE: the barrier orders every thread's data stores before the release atomics that publish them.
    tl.debug_barrier()
    tl.atomic_add(arrivals_ptr + ranks, counts, mask=(ranks < R) & (counts > 0), sem="release", scope="gpu")


@triton.jit
def _wait_arrivals(arrivals_ptr, target_ptr, timeouts_ptr, rank, MAX_SPINS: tl.constexpr):
    """The push receiver: spin (acquire) until the counter reaches ``target[rank]``, the rows every push so far
    should have delivered to this rank."""
    target = tl.load(target_ptr + rank)
    seen = tl.atomic_add(arrivals_ptr + rank, 0, sem="acquire", scope="gpu")
    spins = 0
    while (seen < target) & (spins < MAX_SPINS):
        seen = tl.atomic_add(arrivals_ptr + rank, 0, sem="acquire", scope="gpu")
        spins += 1
    if seen < target:
        tl.atomic_add(timeouts_ptr, 1)


@triton.jit
def _block_rows(data_pid, peer_rank_ptr, peer_row_ptr, N, BLOCK_ROWS: tl.constexpr):
    """This program's rank, its rows, and the peer (rank, row) of each; ``real`` is False on padding."""
    blocks_per_rank = tl.cdiv(N, BLOCK_ROWS)
    rank = data_pid // blocks_per_rank
    rows = (data_pid % blocks_per_rank) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_range = rows < N
    peer_rank = tl.load(peer_rank_ptr + rank * N + rows, mask=in_range, other=-1)
    peer_row = tl.load(peer_row_ptr + rank * N + rows, mask=in_range, other=0)
    real = peer_rank >= 0
    return rank, rows, peer_rank, peer_row, real


@triton.jit
def _move_rows(own_ptrs, peer_ptrs, base_ptr, base_addr, rank, rows, peer_rank, peer_row, real, H, own_stride,
               peer_stride, OWN_DIV: tl.constexpr, PEER_DIV: tl.constexpr, PULL: tl.constexpr,
               BLOCK_COLS: tl.constexpr):
    """Copy ``H`` elements per real row, own <- peer (PULL) or own -> peer (PUSH)."""
    # Every rank's buffer is addressed as an element offset from one base pointer (``base_ptr``, whose address
    # is ``base_addr``). NOTE: allocations are 16-byte aligned, and saying so (multiple_of) is what lets the
    # compiler use 16-byte loads and stores: pointers cast from a table of integers would be assumed unaligned.
    elem_bytes: tl.constexpr = base_ptr.dtype.element_ty.primitive_bitwidth // 8
    align: tl.constexpr = 16 // elem_bytes
    own_base = tl.multiple_of((tl.load(own_ptrs + rank) - base_addr) // elem_bytes, align)
    peer_base = tl.multiple_of((tl.load(peer_ptrs + tl.maximum(peer_rank, 0)) - base_addr) // elem_bytes, align)
    own_rows = own_base + (rows // OWN_DIV).to(tl.int64) * own_stride
    peer_rows = peer_base + (peer_row // PEER_DIV).to(tl.int64) * peer_stride
    for col0 in range(0, H, BLOCK_COLS):
        cols = col0 + tl.arange(0, BLOCK_COLS)
        mask = real[:, None] & (cols < H)[None, :]
        if PULL:
            values = tl.load(base_ptr + peer_rows[:, None] + cols[None, :], mask=mask)
            tl.store(base_ptr + own_rows[:, None] + cols[None, :], values, mask=mask)
        else:
            values = tl.load(base_ptr + own_rows[:, None] + cols[None, :], mask=mask)
            tl.store(base_ptr + peer_rows[:, None] + cols[None, :], values, mask=mask)


# ----------------------------------------------------------------------------------------------------------
# The kernel
# ----------------------------------------------------------------------------------------------------------
@triton.jit
def _transfer_rows_kernel(
        own_ptrs, peer_ptrs,                # int64 [R]: base address of the own / peer buffer on each rank
        base_ptr, base_addr,                # own rank 0's buffer and its address: rows are offsets from it
        peer_rank_ptr, peer_row_ptr,        # int32 [R, N]: the peer (rank, row) of each own row; rank -1 = skip
        arrivals_ptr, target_ptr,           # int64 [R]: push arrival counters; rows expected so far
        ready_ptr, timeouts_ptr,            # int32 [R]: pull ready flags; int32 [1]: waits that gave up
        epoch, N, H, own_stride, peer_stride,
        R: tl.constexpr, R_POW2: tl.constexpr, OWN_DIV: tl.constexpr, PEER_DIV: tl.constexpr,
        PULL: tl.constexpr, SIGNAL: tl.constexpr, MOVE_DATA: tl.constexpr,
        BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, MAX_SPINS: tl.constexpr):
    pid = tl.program_id(0)
    n_data = R * tl.cdiv(N, BLOCK_ROWS)
    # ---- roles: [publishers (pull+signal)] [data programs] [receivers (push+signal)] ----
    if SIGNAL and PULL:
        if pid < R:
            _publish_ready(ready_ptr, pid, epoch)
        else:
            rank, rows, peer_rank, peer_row, real = _block_rows(pid - R, peer_rank_ptr, peer_row_ptr, N,
                                                                BLOCK_ROWS)
            _wait_ready(ready_ptr, timeouts_ptr, peer_rank, real, epoch, MAX_SPINS)
            if MOVE_DATA:
                _move_rows(own_ptrs, peer_ptrs, base_ptr, base_addr, rank, rows, peer_rank, peer_row, real, H,
                           own_stride, peer_stride, OWN_DIV, PEER_DIV, PULL, BLOCK_COLS)
    elif SIGNAL:
        if pid < n_data:
            rank, rows, peer_rank, peer_row, real = _block_rows(pid, peer_rank_ptr, peer_row_ptr, N,
                                                                BLOCK_ROWS)
            if MOVE_DATA:
                _move_rows(own_ptrs, peer_ptrs, base_ptr, base_addr, rank, rows, peer_rank, peer_row, real, H,
                           own_stride, peer_stride, OWN_DIV, PEER_DIV, PULL, BLOCK_COLS)
            _count_arrivals(arrivals_ptr, peer_rank, real, R, R_POW2)
        else:
            _wait_arrivals(arrivals_ptr, target_ptr, timeouts_ptr, pid - n_data, MAX_SPINS)
    else:
        rank, rows, peer_rank, peer_row, real = _block_rows(pid, peer_rank_ptr, peer_row_ptr, N, BLOCK_ROWS)
        _move_rows(own_ptrs, peer_ptrs, base_ptr, base_addr, rank, rows, peer_rank, peer_row, real, H, own_stride,
                   peer_stride, OWN_DIV, PEER_DIV, PULL, BLOCK_COLS)


# ----------------------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------------------
@dataclass
class SignalState:
    """Counters and flags of the signalling variants, kept across calls (compared with a growing epoch).

    Attributes:
        arrivals: ``[R]`` int64, rows delivered to each rank so far by push transfers.
        targets: ``[R]`` int64, rows each rank should have received once the latest push is complete: the
            running sum of every push's expected counts (dispatch and combine expect different counts, so a
            target of ``epoch * expected`` would be wrong as soon as both share one state). Updated in-stream.
        ready: ``[R]`` int32, the last epoch each rank published as "buffer ready" (pull transfers).
        timeouts: ``[1]`` int32, waits that gave up after ``MAX_SPINS``; must stay 0.
        epoch: the epoch of the last call.
    """

    arrivals: torch.Tensor
    targets: torch.Tensor
    ready: torch.Tensor
    timeouts: torch.Tensor
    epoch: int = 0

    @classmethod
    def create(cls, world_size: int, device: torch.device | str) -> "SignalState":
        return cls(torch.zeros(world_size, dtype=torch.int64, device=device),
                   torch.zeros(world_size, dtype=torch.int64, device=device),
                   torch.zeros(world_size, dtype=torch.int32, device=device),
                   torch.zeros(1, dtype=torch.int32, device=device))

    def next_epoch(self) -> int:
        self.epoch += 1
        return self.epoch

    def check(self) -> None:
        """Raise if any wait timed out (synchronises)."""
        timeouts = int(self.timeouts.item())
        if timeouts:
            raise RuntimeError(f"{timeouts} signal waits timed out (epoch {self.epoch}): a sender never signalled")


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'pull' or 'push', got {direction!r}")


def transfer_rows(own: PeerBuffer, peer: PeerBuffer, peer_rank: torch.Tensor, peer_row: torch.Tensor, *,
                  direction: str, own_div: int = 1, peer_div: int = 1, signal: SignalState | None = None,
                  expected: torch.Tensor | None = None, move_data: bool = True, block_rows: int = 4) -> None:
    """Launch the row-transfer kernel once for all ranks.

    Args:
        own: the buffer the programs' own rows live in, ``[*, H]`` on every rank.
        peer: the buffer on the other side, ``[*, H]`` on every rank, same dtype.
        peer_rank, peer_row: ``[R, N]`` int32: for own row ``n`` of rank ``r``, the peer rank (-1: skip the
            row) and the peer row (before division by ``peer_div``).
        direction: ``"pull"`` (own <- peer) or ``"push"`` (own -> peer).
        own_div, peer_div: own row ``n`` addresses ``own[r][n // own_div]``; peer row ``p`` addresses
            ``peer[q][p // peer_div]`` (``top_k`` where a buffer holds tokens and the table counts slots).
        signal: add completion signalling (see the module docstring); ``None`` for data only.
        expected: ``[R]`` int64 rows each rank receives per call; needed by push with ``signal``.
        move_data: ``False`` keeps only the signalling (needs ``signal``).
    """
    _check_direction(direction)
    if own.dtype != peer.dtype:
        raise TypeError(f"own ({own.dtype}) and peer ({peer.dtype}) buffers must share a dtype")
    if not move_data and signal is None:
        raise ValueError("move_data=False without signal would launch a kernel that does nothing")
    world, n_rows = peer_rank.shape
    if own.world_size != world or peer.world_size != world:
        raise ValueError(f"tables have {world} ranks but buffers have {own.world_size} / {peer.world_size}")
    hidden = own.shape[-1]
    if peer.shape[-1] != hidden:
        raise ValueError(f"row lengths differ: own {own.shape[-1]}, peer {peer.shape[-1]}")
    misaligned = [v.data_ptr() for v in (*own.views, *peer.views) if v.data_ptr() % 16]
    if misaligned:
        raise ValueError(f"peer buffers must be 16-byte aligned; found addresses {misaligned[:4]}")
    pull = direction == "pull"
    if signal is not None and not pull and expected is None:
        raise ValueError("push with signalling needs `expected` (rows each rank receives)")
    epoch = signal.next_epoch() if signal is not None else 0
    if signal is not None and not pull:
        signal.targets += expected.to(signal.targets.dtype)  # in-stream, before the launch that waits on it
    dummy = own.ptr_table  # stands in for signalling pointers the data-only variant never touches
    blocks = world * triton.cdiv(n_rows, block_rows)
    grid = (blocks + (world if signal is not None else 0),)
    _transfer_rows_kernel[grid](
        own.ptr_table, peer.ptr_table, own.views[0], own.views[0].data_ptr(), peer_rank, peer_row,
        signal.arrivals if signal is not None else dummy,
        signal.targets if signal is not None else dummy,
        signal.ready if signal is not None else dummy,
        signal.timeouts if signal is not None else dummy,
        epoch, n_rows, hidden, own.views[0].stride(0), peer.views[0].stride(0),
        R=world, R_POW2=_next_pow2(world), OWN_DIV=own_div, PEER_DIV=peer_div, PULL=pull,
        SIGNAL=signal is not None, MOVE_DATA=move_data, BLOCK_ROWS=block_rows,
        BLOCK_COLS=min(1024, _next_pow2(hidden)), MAX_SPINS=1000 if _interpreting() else 1 << 22,
        num_warps=4)


@dataclass
class PushPullPlan:
    """Both sides' tables of a :class:`~mok.schedule.Schedule`, ready for the four transfers in either direction.

    Built once per routing (contiguous int32 tables and the per-rank row counts signalling expects), so a
    timed call launches one kernel and nothing else.
    """

    schedule: Schedule
    expert_rank_table: torch.Tensor = field(init=False)   # [R, capacity] src_rank
    expert_row_table: torch.Tensor = field(init=False)    # [R, capacity] src_slot
    source_rank_table: torch.Tensor = field(init=False)   # [R, slots] dest_rank
    source_row_table: torch.Tensor = field(init=False)    # [R, slots] dest_row
    rows_per_expert_rank: torch.Tensor = field(init=False)  # [R] int64 real rows each expert rank receives
    slots_per_source_rank: torch.Tensor = field(init=False)  # [R] int64 slots each source rank receives

    def __post_init__(self) -> None:
        s = self.schedule
        self.expert_rank_table = s.src_rank.contiguous()
        self.expert_row_table = s.src_slot.contiguous()
        self.source_rank_table = s.dest_rank.contiguous()
        self.source_row_table = s.dest_row.contiguous()
        self.rows_per_expert_rank = s.segment_counts.sum(dim=1).to(torch.int64)
        self.slots_per_source_rank = torch.full((s.ep_size,), s.slots_per_rank, dtype=torch.int64,
                                                device=s.src_rank.device)

    @property
    def real_rows(self) -> int:
        """Rows every transfer moves: one per (token, k) pair."""
        return self.schedule.ep_size * self.schedule.slots_per_rank

    def dispatch(self, x: PeerBuffer, recv: PeerBuffer, direction: str, *, signal: SignalState | None = None,
                 move_data: bool = True) -> None:
        """``recv[d][r] = x[src_rank][src_slot // top_k]`` for every real schedule row ``r`` of every rank ``d``.

        ``x``: ``[T_local, H]`` per rank; ``recv``: ``[capacity, H]`` per rank (padding rows are not touched).
        """
        _check_direction(direction)
        k = self.schedule.top_k
        if direction == "pull":
            transfer_rows(recv, x, self.expert_rank_table, self.expert_row_table, direction="pull", peer_div=k,
                          signal=signal, move_data=move_data)
        else:
            transfer_rows(x, recv, self.source_rank_table, self.source_row_table, direction="push", own_div=k,
                          signal=signal, expected=self.rows_per_expert_rank, move_data=move_data)

    def combine(self, y: PeerBuffer, slots: PeerBuffer, direction: str, *, signal: SignalState | None = None,
                move_data: bool = True) -> None:
        """``slots[src_rank][src_slot] = y[d][r]`` for every real schedule row ``r`` of every rank ``d``.

        ``y``: ``[capacity, H]`` per rank (expert outputs); ``slots``: ``[T_local * top_k, H]`` per rank.
        """
        _check_direction(direction)
        if direction == "push":
            transfer_rows(y, slots, self.expert_rank_table, self.expert_row_table, direction="push",
                          signal=signal, expected=self.slots_per_source_rank, move_data=move_data)
        else:
            transfer_rows(slots, y, self.source_rank_table, self.source_row_table, direction="pull",
                          signal=signal, move_data=move_data)
