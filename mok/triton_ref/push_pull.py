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

Which ranks one launch drives
-----------------------------
A launch runs the programs of a list of ranks (``ranks``, an int32 tensor the programs index): every rank when
the ranks are emulated in one process (one launch moves everything), or the process's own rank across GPUs
(``peers.local_ranks``: each GPU launches its rank's programs, and they meet only in each other's memory).

Completion signalling (``SIGNAL``)
----------------------------------
* **Push** needs the receiver to learn when every sender has finished writing into it: each program, after its
  stores (and a CTA barrier), adds the number of rows it delivered to each destination to that destination's
  arrival counter with a *release* atomic; one receiver program per launched rank spins (*acquire*) until its
  counter reaches the rows it expects. These receiver programs come last in the grid, after every sender.
* **Pull** needs only that the source's buffer is ready: one publisher program per launched rank sets its ready
  flag (*release*), and each reading program waits (*acquire*) on the flags of the ranks its rows name.
  Publishers come first in the grid. In a real layer the flag is set long before by whatever produced the
  buffer.

Where the signals live: every rank owns ``SIGNAL_WORDS`` int64 words (arrival counter, arrival target, ready
flag, time-outs) in a :class:`~mok.comm.PeerBuffer` (:class:`SignalState`), so a program reaches a peer's
counter or flag through the buffer's ``ptr_table``, exactly as it reaches a peer's rows: a push's arrival
atomics and a pull's flag polls are remote atomics over NVLink on real GPUs, local ones when emulated. Each
receiver keeps its own target (the running sum of the rows every push so far should have delivered to it) and
raises it by ``expected[rank]`` itself, so a call launches one kernel and nothing else. Counters, targets and
flags only grow (flags are compared with an epoch that grows every call), so nothing is reset between calls.
Every spin is bounded by ``MAX_SPINS``; a wait that gives up increments its rank's time-out word, which
:meth:`SignalState.check` turns into an error. NOTE: because counters are cumulative, a receiver can be
released by a *later* call's arrivals while an earlier call's slowest sender is still writing; a run of
back-to-back calls is complete when its last wait returns (what timing needs), but a caller that reuses a
buffer per call needs the calls separated (a barrier, or a "slot free" signal back).

Memory scope (``SCOPE``): the release and acquire atomics use scope ``"gpu"`` when one launch drives every rank
(emulated ranks on one device: every signalling thread is on this GPU) and ``"sys"`` otherwise. In the PTX
memory model a release/acquire pair synchronises only if each side's scope includes the other thread, and the
only scope that includes threads of *another GPU* is ``.sys`` (``.gpu`` covers one device). So across GPUs a
push's "rows delivered" and a pull's "buffer ready" must be ``.sys`` (as PyTorch symmetric memory's own signal
pads are); it costs a system-scope fence per signal, which the signal-only variant measures.

``MOVE_DATA=False`` keeps only the signalling: its time is the signalling latency on this machine.

Emulated ranks (one launch, one GPU): the "link" is HBM and L2, so bandwidths are memory-system numbers, not
NVLink numbers, and the push/pull asymmetry that MoK measured on NVLink lanes cannot show up as such. Across
GPUs (``python -m mok.dist_cli bench`` under torchrun) the same kernel moves rows over NVLink.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Sequence

import torch
import triton
import triton.language as tl

from ..comm import EmulatedPeers, PeerBuffer, PeerGroup
from ..schedule import Schedule
from ._common import INTERPRETING, cdiv

DIRECTIONS = ("pull", "push")
SCOPES = ("gpu", "sys")

# Each rank's signal words (int64, in a PeerBuffer of shape [SIGNAL_WORDS] per rank).
ARRIVALS = tl.constexpr(0)   # rows delivered to this rank by pushes so far (peers add to it)
TARGET = tl.constexpr(1)     # rows every push so far should have delivered (this rank's receiver raises it)
READY = tl.constexpr(2)      # the last epoch this rank published as "buffer ready" (peers poll it)
TIMEOUTS = tl.constexpr(3)   # this rank's waits that gave up (must stay 0)
SIGNAL_WORDS = 4


# ----------------------------------------------------------------------------------------------------------
# Device helpers: one per role
# ----------------------------------------------------------------------------------------------------------
@triton.jit
def _signal_words(signal_ptrs, rank):
    """Pointer to rank ``rank``'s signal words (``rank`` a scalar or a block), local or a peer's."""
    return tl.load(signal_ptrs + rank).to(tl.pointer_type(tl.int64))


@triton.jit
def _publish_ready(signal_ptrs, rank, epoch, SCOPE: tl.constexpr):
    """Pull's only signal: "my buffer is ready for peers to read", a release store of the epoch."""
    tl.atomic_xchg(_signal_words(signal_ptrs, rank) + READY, epoch, sem="release", scope=SCOPE)


@triton.jit
def _poll(words, mask, SCOPE: tl.constexpr, POLL_LOADS: tl.constexpr):
    """One poll of signal words: an acquire atomic (``POLL_LOADS`` False) or a volatile load, which reads L2
    without taking the line from the peers' atomics (the caller ends a load-polled wait with one acquire)."""
    if POLL_LOADS:
        return tl.load(words, mask=mask, other=0, volatile=True)
    return tl.atomic_add(words, 0, mask=mask, sem="acquire", scope=SCOPE)


@triton.jit
def _wait_ready(signal_ptrs, rank, peer_rank, real, epoch, MAX_SPINS: tl.constexpr, SCOPE: tl.constexpr,
                POLL_LOADS: tl.constexpr):
    """Spin until every rank named by ``peer_rank`` (where ``real``) has published ``epoch``; the last read is
    an acquire."""
    flags = _signal_words(signal_ptrs, tl.maximum(peer_rank, 0)) + READY
    seen = tl.where(real, tl.atomic_add(flags, 0, mask=real, sem="acquire", scope=SCOPE), epoch)
    spins = 0
    while (tl.min(seen, axis=0) < epoch) & (spins < MAX_SPINS):
        seen = tl.where(real, _poll(flags, real, SCOPE, POLL_LOADS), epoch)
        spins += 1
    if POLL_LOADS:  # the acquire that orders this program's reads of the rows after the publishers' release
        seen = tl.where(real, tl.atomic_add(flags, 0, mask=real, sem="acquire", scope=SCOPE), epoch)
    if tl.min(seen, axis=0) < epoch:
        tl.atomic_add(_signal_words(signal_ptrs, rank) + TIMEOUTS, 1)


@triton.jit
def _count_arrivals(signal_ptrs, peer_rank, real, R: tl.constexpr, R_POW2: tl.constexpr, SCOPE: tl.constexpr):
    """Push's signal: after this program's stores, add the rows it delivered to each destination's counter."""
    ranks = tl.arange(0, R_POW2)
    counts = tl.sum(((peer_rank[:, None] == ranks[None, :]) & real[:, None]).to(tl.int64), axis=0)
    counters = _signal_words(signal_ptrs, tl.minimum(ranks, R - 1)) + ARRIVALS
    # NOTE: the barrier orders every thread's data stores before the release atomics that publish them.
    tl.debug_barrier()
    tl.atomic_add(counters, counts, mask=(ranks < R) & (counts > 0), sem="release", scope=SCOPE)


@triton.jit
def _wait_arrivals(signal_ptrs, expected_ptr, rank, MAX_SPINS: tl.constexpr, SCOPE: tl.constexpr,
                   POLL_LOADS: tl.constexpr):
    """The push receiver of ``rank``: raise its target by the rows this call delivers to it, then spin
    (acquire) until its arrival counter reaches the target."""
    words = _signal_words(signal_ptrs, rank)
    # Only this program touches the target (one receiver per rank per call; calls are stream-ordered).
    target = tl.load(words + TARGET) + tl.load(expected_ptr + rank)
    # NOTE: every thread of the program loads the old target, and one thread stores the new one: the barrier
    # keeps that store behind every load. Without it a late warp read the new target, waited for twice the
    # rows and spun to MAX_SPINS, while the thread that checks for time-outs saw its own, correct target (seen
    # on the H200, 2026-11-29: push with signalling took ~240 ms instead of ~0.6 ms, with no time-out recorded).
    tl.debug_barrier()
    tl.store(words + TARGET, target)
    seen = tl.atomic_add(words + ARRIVALS, 0, sem="acquire", scope=SCOPE)
    spins = 0
    while (seen < target) & (spins < MAX_SPINS):
        seen = _poll(words + ARRIVALS, rank >= 0, SCOPE, POLL_LOADS)  # (a mask that is always true)
        spins += 1
    if POLL_LOADS:  # the acquire that orders the rows after the senders' release
        seen = tl.atomic_add(words + ARRIVALS, 0, sem="acquire", scope=SCOPE)
    if seen < target:
        tl.atomic_add(words + TIMEOUTS, 1)


@triton.jit
def _block_rows(data_pid, ranks_ptr, peer_rank_ptr, peer_row_ptr, N, BLOCK_ROWS: tl.constexpr):
    """This program's rank (from the launched ranks), its rows, and the peer (rank, row) of each; ``real`` is
    False on padding."""
    blocks_per_rank = tl.cdiv(N, BLOCK_ROWS)
    rank = tl.load(ranks_ptr + data_pid // blocks_per_rank)
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
# NOTE: `epoch` grows by one every signalled call. Triton specialises integer arguments (== 1, divisible by 16) and
# compiles a variant the first time a new specialisation appears, which for the epoch would be in the middle of a
# timed run; so it is never specialised.
@triton.jit(do_not_specialize=["epoch"])
def _transfer_rows_kernel(
        own_ptrs, peer_ptrs,                # int64 [R]: base address of the own / peer buffer on each rank
        base_ptr, base_addr,                # the first launched rank's own buffer and its address: rows are
                                            # element offsets from it
        ranks_ptr, n_ranks,                 # int32 [n_ranks]: the ranks whose programs this launch runs
        peer_rank_ptr, peer_row_ptr,        # int32 [R, N]: the peer (rank, row) of each own row; rank -1 = skip
        signal_ptrs, expected_ptr,          # int64 [R]: each rank's signal words; int64 [R] rows each rank
                                            # receives per push call
        epoch, N, H, own_stride, peer_stride,
        R: tl.constexpr, R_POW2: tl.constexpr, OWN_DIV: tl.constexpr, PEER_DIV: tl.constexpr,
        PULL: tl.constexpr, SIGNAL: tl.constexpr, MOVE_DATA: tl.constexpr, SCOPE: tl.constexpr,
        BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, MAX_SPINS: tl.constexpr,
        POLL_LOADS: tl.constexpr = False):
    pid = tl.program_id(0)
    n_data = n_ranks * tl.cdiv(N, BLOCK_ROWS)
    # ---- roles: [publishers (pull+signal)] [data programs] [receivers (push+signal)], per launched rank ----
    if SIGNAL and PULL:
        if pid < n_ranks:
            _publish_ready(signal_ptrs, tl.load(ranks_ptr + pid), epoch, SCOPE)
        else:
            rank, rows, peer_rank, peer_row, real = _block_rows(pid - n_ranks, ranks_ptr, peer_rank_ptr,
                                                                peer_row_ptr, N, BLOCK_ROWS)
            _wait_ready(signal_ptrs, rank, peer_rank, real, epoch, MAX_SPINS, SCOPE, POLL_LOADS)
            if MOVE_DATA:
                _move_rows(own_ptrs, peer_ptrs, base_ptr, base_addr, rank, rows, peer_rank, peer_row, real, H,
                           own_stride, peer_stride, OWN_DIV, PEER_DIV, PULL, BLOCK_COLS)
    elif SIGNAL:
        if pid < n_data:
            rank, rows, peer_rank, peer_row, real = _block_rows(pid, ranks_ptr, peer_rank_ptr, peer_row_ptr, N,
                                                                BLOCK_ROWS)
            if MOVE_DATA:
                _move_rows(own_ptrs, peer_ptrs, base_ptr, base_addr, rank, rows, peer_rank, peer_row, real, H,
                           own_stride, peer_stride, OWN_DIV, PEER_DIV, PULL, BLOCK_COLS)
            _count_arrivals(signal_ptrs, peer_rank, real, R, R_POW2, SCOPE)
        else:
            _wait_arrivals(signal_ptrs, expected_ptr, tl.load(ranks_ptr + pid - n_data), MAX_SPINS, SCOPE,
                           POLL_LOADS)
    else:
        rank, rows, peer_rank, peer_row, real = _block_rows(pid, ranks_ptr, peer_rank_ptr, peer_row_ptr, N,
                                                            BLOCK_ROWS)
        _move_rows(own_ptrs, peer_ptrs, base_ptr, base_addr, rank, rows, peer_rank, peer_row, real, H, own_stride,
                   peer_stride, OWN_DIV, PEER_DIV, PULL, BLOCK_COLS)


# ----------------------------------------------------------------------------------------------------------
# Host side
# ----------------------------------------------------------------------------------------------------------
@dataclass
class SignalState:
    """The signal words of every rank, kept across calls (see "Where the signals live" in the module docstring).

    Attributes:
        words: ``[SIGNAL_WORDS]`` int64 on every rank (a :class:`~mok.comm.PeerBuffer`): arrival counter,
            arrival target, ready epoch, time-outs (indices ``ARRIVALS``, ``TARGET``, ``READY``, ``TIMEOUTS``).
        local_ranks: the ranks this process launches for (whose time-outs :meth:`check` reads).
        epoch: the epoch of the last call (every process counts the same calls, so epochs agree).

    ``arrivals``, ``targets`` and ``ready`` read one word of every rank as an ``[R]`` int64 tensor (peers'
    words through their mapping; for checks, not for hot paths); :meth:`check` reads the time-outs.
    """

    words: PeerBuffer
    local_ranks: list[int]
    epoch: int = 0

    @classmethod
    def create(cls, world_size: int, device: torch.device | str) -> "SignalState":
        """Signal words for ``world_size`` ranks emulated on ``device`` (all of them local)."""
        return cls.on_peers(EmulatedPeers(world_size, device))

    @classmethod
    def on_peers(cls, peers: PeerGroup, name: str = "push_pull_signals") -> "SignalState":
        """Signal words in ``peers``' memory (collective on real peers: every rank calls it). One state per
        ``name`` at a time: a second state under the same name shares, and re-zeroes, the words."""
        words = peers.buffer(name, (SIGNAL_WORDS,), torch.int64)
        for rank in peers.local_ranks:
            words[rank].zero_()
        peers.barrier()  # no peer signals into a rank's words before that rank has zeroed them
        return cls(words, list(peers.local_ranks))

    def _word(self, index) -> torch.Tensor:
        return torch.stack([view[int(index)] for view in self.words.views])

    @property
    def arrivals(self) -> torch.Tensor:
        return self._word(ARRIVALS)

    @property
    def targets(self) -> torch.Tensor:
        return self._word(TARGET)

    @property
    def ready(self) -> torch.Tensor:
        return self._word(READY)

    def next_epoch(self) -> int:
        self.epoch += 1
        return self.epoch

    def check(self) -> None:
        """Raise if any wait of a local rank timed out (synchronises)."""
        timeouts = sum(int(self.words[rank][int(TIMEOUTS)]) for rank in self.local_ranks)
        if timeouts:
            raise RuntimeError(f"{timeouts} signal waits timed out (epoch {self.epoch}): a sender never signalled")


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def _check_direction(direction: str) -> None:
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'pull' or 'push', got {direction!r}")


POLLS = ("atomic", "load")


def default_poll() -> str:
    """``MOK_PUSH_PULL_POLL`` (default ``atomic``): how waits poll the signal words (:func:`transfer_rows`)."""
    return os.environ.get("MOK_PUSH_PULL_POLL", "atomic")


@functools.lru_cache(maxsize=None)
def _rank_list(ranks: tuple[int, ...], device: str) -> torch.Tensor:
    """The launched ranks as an int32 tensor on the kernel's device, made once (no copy per timed call)."""
    return torch.tensor(ranks, dtype=torch.int32, device=device)


def transfer_rows(own: PeerBuffer, peer: PeerBuffer, peer_rank: torch.Tensor, peer_row: torch.Tensor, *,
                  direction: str, own_div: int = 1, peer_div: int = 1, signal: SignalState | None = None,
                  expected: torch.Tensor | None = None, move_data: bool = True, block_rows: int = 4,
                  ranks: Sequence[int] | None = None, scope: str | None = None,
                  max_spins: int | None = None, poll: str | None = None) -> None:
    """Launch the row-transfer kernel once for the programs of ``ranks``.

    Args:
        own: the buffer the programs' own rows live in, ``[*, H]`` on every rank.
        peer: the buffer on the other side, ``[*, H]`` on every rank, same dtype.
        peer_rank, peer_row: ``[R, N]`` int32: for own row ``n`` of rank ``r``, the peer rank (-1: skip the
            row) and the peer row (before division by ``peer_div``).
        direction: ``"pull"`` (own <- peer) or ``"push"`` (own -> peer).
        own_div, peer_div: own row ``n`` addresses ``own[r][n // own_div]``; peer row ``p`` addresses
            ``peer[q][p // peer_div]`` (``top_k`` where a buffer holds tokens and the table counts slots).
        signal: add completion signalling (see the module docstring); ``None`` for data only.
        expected: ``[R]`` int64 rows each rank receives per call, on the kernel's device; needed by push with
            ``signal``.
        move_data: ``False`` keeps only the signalling (needs ``signal``).
        ranks: the ranks whose programs run: ``None`` for every rank (emulated ranks, one launch), else this
            process's ranks (``peers.local_ranks`` across GPUs; every rank must launch its own).
        scope: ``"gpu"`` or ``"sys"`` for the signal atomics; ``None``: ``"gpu"`` when the launch drives every
            rank, else ``"sys"`` (peers on other GPUs).
        max_spins: bound on each wait's polls (default: ``2**22`` compiled, ``2**15`` interpreted).
        poll: how a wait polls the signal words: ``"atomic"`` (acquire atomics) or ``"load"`` (volatile loads,
            then one acquire); default :func:`default_poll`.
    """
    _check_direction(direction)
    if own.dtype != peer.dtype:
        raise TypeError(f"own ({own.dtype}) and peer ({peer.dtype}) buffers must share a dtype")
    if not move_data and signal is None:
        raise ValueError("move_data=False without signal would launch a kernel that does nothing")
    world, n_rows = peer_rank.shape
    if own.world_size != world or peer.world_size != world:
        raise ValueError(f"tables have {world} ranks but buffers have {own.world_size} / {peer.world_size}")
    if signal is not None and signal.words.world_size != world:
        raise ValueError(f"tables have {world} ranks but the signal state has {signal.words.world_size}")
    ranks = tuple(range(world)) if ranks is None else tuple(int(r) for r in ranks)
    if not ranks or any(not 0 <= r < world for r in ranks):
        raise ValueError(f"ranks must be a non-empty list of ranks in [0, {world}), got {list(ranks)}")
    scope = scope or ("gpu" if len(ranks) == world else "sys")
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {SCOPES}, got {scope!r}")
    hidden = own.shape[-1]
    if peer.shape[-1] != hidden:
        raise ValueError(f"row lengths differ: own {own.shape[-1]}, peer {peer.shape[-1]}")
    misaligned = [v.data_ptr() for v in (*own.views, *peer.views) if v.data_ptr() % 16]
    if misaligned:
        raise ValueError(f"peer buffers must be 16-byte aligned; found addresses {misaligned[:4]}")
    pull = direction == "pull"
    if signal is not None and not pull and expected is None:
        raise ValueError("push with signalling needs `expected` (rows each rank receives)")
    poll = poll or default_poll()
    if poll not in POLLS:
        raise ValueError(f"poll must be one of {POLLS}, got {poll!r}")
    epoch = signal.next_epoch() if signal is not None else 0  # (after every check: no epoch without a launch)
    if max_spins is None:
        max_spins = 1 << 15 if INTERPRETING else 1 << 22
    base = own.views[ranks[0]]  # a launched rank's buffer: local memory on every kind of peer group
    dummy = own.ptr_table  # stands in for signalling pointers the data-only variant never touches
    blocks = len(ranks) * cdiv(n_rows, block_rows)
    grid = (blocks + (len(ranks) if signal is not None else 0),)
    _transfer_rows_kernel[grid](
        own.ptr_table, peer.ptr_table, base, base.data_ptr(), _rank_list(ranks, str(peer_rank.device)),
        len(ranks), peer_rank, peer_row,
        signal.words.ptr_table if signal is not None else dummy,
        expected if expected is not None else dummy,
        epoch, n_rows, hidden, own.views[0].stride(0), peer.views[0].stride(0),
        R=world, R_POW2=_next_pow2(world), OWN_DIV=own_div, PEER_DIV=peer_div, PULL=pull,
        SIGNAL=signal is not None, MOVE_DATA=move_data, SCOPE=scope, BLOCK_ROWS=block_rows,
        BLOCK_COLS=min(1024, _next_pow2(hidden)), MAX_SPINS=max_spins, POLL_LOADS=poll == "load", num_warps=4)


@dataclass
class PushPullPlan:
    """Both sides' tables of a :class:`~mok.schedule.Schedule`, ready for the four transfers in either direction.

    Built once per routing (contiguous int32 tables and the per-rank row counts signalling expects), so a
    timed call launches one kernel and nothing else.

    ``local_ranks``: the ranks whose programs this process launches: ``None`` (every rank, emulated in one
    process) or ``peers.local_ranks`` across GPUs. ``scope``: the signal atomics' scope (``None``: see
    :func:`transfer_rows`).
    """

    schedule: Schedule
    local_ranks: Sequence[int] | None = None
    scope: str | None = None
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
        """Rows every transfer moves (all ranks together): one per (token, k) pair."""
        return self.schedule.ep_size * self.schedule.slots_per_rank

    def _launch(self, own, peer, tables, direction, **kwargs) -> None:
        transfer_rows(own, peer, *tables, direction=direction, ranks=self.local_ranks, scope=self.scope, **kwargs)

    def dispatch(self, x: PeerBuffer, recv: PeerBuffer, direction: str, *, signal: SignalState | None = None,
                 move_data: bool = True) -> None:
        """``recv[d][r] = x[src_rank][src_slot // top_k]`` for every real schedule row ``r`` of every rank ``d``
        (of the local ranks' share: their rows when pulling, their tokens when pushing).

        ``x``: ``[T_local, H]`` per rank; ``recv``: ``[capacity, H]`` per rank (padding rows are not touched).
        """
        _check_direction(direction)
        k = self.schedule.top_k
        if direction == "pull":
            self._launch(recv, x, (self.expert_rank_table, self.expert_row_table), "pull", peer_div=k,
                         signal=signal, move_data=move_data)
        else:
            self._launch(x, recv, (self.source_rank_table, self.source_row_table), "push", own_div=k,
                         signal=signal, expected=self.rows_per_expert_rank, move_data=move_data)

    def combine(self, y: PeerBuffer, slots: PeerBuffer, direction: str, *, signal: SignalState | None = None,
                move_data: bool = True) -> None:
        """``slots[src_rank][src_slot] = y[d][r]`` for every real schedule row ``r`` of every rank ``d`` (of the
        local ranks' share: their rows when pushing, their slots when pulling).

        ``y``: ``[capacity, H]`` per rank (expert outputs); ``slots``: ``[T_local * top_k, H]`` per rank.
        """
        _check_direction(direction)
        if direction == "push":
            self._launch(y, slots, (self.expert_rank_table, self.expert_row_table), "push",
                         signal=signal, expected=self.slots_per_source_rank, move_data=move_data)
        else:
            self._launch(slots, y, (self.source_rank_table, self.source_row_table), "pull",
                         signal=signal, move_data=move_data)
