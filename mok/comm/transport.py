"""Transports: how the rows that a schedule table names move between ranks, behind one interface.

A layer run (:class:`mok.backends.reference.LayerRun`) never moves a row itself. It asks its transport to

* ``publish(name, rank, tensor)``: make ``tensor`` (rank ``rank``'s ``x``, router weights or ``dO``) readable
  by every rank; returns a handle to pull from;
* ``slots(name, shape, dtype)``: a per-(token, k) destination on every rank that peers push into, poisoned
  with NaN so an unwritten slot shows; returns a handle to push into;
* ``pull(rank, windows, src, out, by_token=...)`` / ``pull_grad_and_weight(...)`` and
  ``push(rank, windows, values, dst)``: the transfers of :mod:`mok.transfers` for rank ``rank``'s table rows
  ``windows[rank]``; ``windows`` holds every rank's window of the current step, because a collective
  transport must know what all ranks move;
* ``local(handle, rank)``: rank ``rank``'s own tensor of a handle (to sum its slots);
* ``fence()``: every rank's earlier publishes and pushes are visible to every rank after it returns.

``local_ranks`` are the ranks this process drives: every rank when emulated, one per process across GPUs.
Transfers are issued rank by rank; a transport whose transfers are collectives (``all_to_all_single``) serves
exactly one local rank.

Two transports live here, both over a :class:`~mok.comm.peers.PeerGroup` (emulated, symmetric memory or
host-shared memory): :class:`PeerTransport` (the PyTorch semantics of :mod:`mok.transfers`) and
:class:`TritonPeerTransport` (the Triton transfer kernels, which read each peer's base address from the
buffer's ``ptr_table``). The collective one is :class:`mok.distributed.CollectiveTransport`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from ..schedule import RankSchedule, Schedule
from ..transfers import pull_rows, push_rows
from .peers import PeerBuffer, PeerGroup

Window = tuple[int, int]  # schedule rows [start, end) of one rank's table


class Transport(ABC):
    """How rows move between ranks, for the ranks of one process (see the module docstring).

    ``local_ranks``: the ranks whose transfers this transport issues. ``kind``: its name in
    :data:`mok.distributed.TRANSPORTS`. Handles returned by :meth:`publish` and :meth:`slots` name the buffer
    on every rank.
    """

    local_ranks: list[int]
    kind: str

    @abstractmethod
    def publish(self, name: str, rank: int, local: torch.Tensor):
        """Make rank ``rank``'s ``local`` readable by every rank under ``name`` (after the next fence)."""

    @abstractmethod
    def slots(self, name: str, shape: tuple[int, ...], dtype: torch.dtype):
        """A ``shape`` buffer per rank (one entry per (token, k) slot) for peers to push into; NaN-poisoned."""

    @abstractmethod
    def local(self, handle, rank: int) -> torch.Tensor:
        """Rank ``rank``'s own tensor of ``handle``."""

    @abstractmethod
    def fence(self) -> None:
        """Every rank's earlier publishes and pushes are visible to every rank afterwards."""

    @abstractmethod
    def pull(self, rank: int, windows: list[Window], src, out: torch.Tensor, *, by_token: bool) -> None:
        """``out[j] = src[src_rank][index]`` for rank ``rank``'s table rows ``windows[rank]`` (zero on
        padding); ``index`` is the token (``by_token``, for ``[T_rank, ...]`` buffers) or the (token, k) slot."""

    def pull_grad_and_weight(self, rank: int, windows: list[Window], grad_src, weight_src, grad_out: torch.Tensor,
                             weight_out: torch.Tensor) -> None:
        """Pull reverse-combine: dO rows by token into ``grad_out``, router weights by slot into ``weight_out``."""
        self.pull(rank, windows, grad_src, grad_out, by_token=True)
        self.pull(rank, windows, weight_src, weight_out, by_token=False)

    @abstractmethod
    def push(self, rank: int, windows: list[Window], values: torch.Tensor, dst) -> None:
        """``dst[src_rank][src_slot] = values[j]`` for rank ``rank``'s real table rows ``windows[rank]``."""


class PeerTransport(Transport):
    """Pulls and pushes through peer memory with :mod:`mok.transfers` as is: one-sided, no lockstep.

    ``publish`` copies a rank's tensor into its symmetric buffer; between :meth:`fence` calls a rank reads its
    peers' published buffers and writes into their slot buffers.
    """

    kind = "peers"

    def __init__(self, schedule: Schedule, peers: PeerGroup) -> None:
        if peers.world_size != schedule.ep_size:
            raise ValueError(f"peer group has {peers.world_size} ranks, the schedule {schedule.ep_size}")
        self.peers = peers
        self.local_ranks = list(peers.local_ranks)
        self.tables: dict[int, RankSchedule] = {r: schedule.rank(r) for r in self.local_ranks}

    def publish(self, name: str, rank: int, local: torch.Tensor) -> PeerBuffer:
        buf = self.peers.buffer(name, tuple(local.shape), local.dtype)
        buf[rank].copy_(local)
        return buf

    def slots(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        buf = self.peers.buffer(name, shape, dtype)
        for rank in self.local_ranks:
            buf[rank].fill_(float("nan"))  # poison: a slot nobody writes shows up as NaN
        return buf

    def local(self, buf: PeerBuffer, rank: int) -> torch.Tensor:
        return buf[rank]

    def fence(self) -> None:
        self.peers.barrier()

    # One-sided: a rank with nothing to move this step does nothing (a collective transport could not).
    def pull(self, rank: int, windows: list[Window], src: PeerBuffer, out: torch.Tensor, *, by_token: bool) -> None:
        start, end = windows[rank]
        if end > start:
            pull_rows(self.tables[rank], start, end, src, out, by_token=by_token)

    def push(self, rank: int, windows: list[Window], values: torch.Tensor, dst: PeerBuffer) -> None:
        start, end = windows[rank]
        if end > start:
            push_rows(self.tables[rank], start, end, values, dst)


class TritonPeerTransport(PeerTransport):
    """:class:`PeerTransport` whose pulls and pushes are the Triton kernels of :mod:`mok.triton_ref`: each
    program loads a peer's base address from the buffer's ``ptr_table`` and reads or writes the peer's memory
    directly (NVLink on GPUs; the emulated ranks' allocations in one process; mapped shared memory on CPUs
    under ``TRITON_INTERPRET=1``).

    Per-slot fp32 buffers (router weights, dw) are kept ``[slots, 1]`` so the row kernels move them too.
    """

    kind = "peers-triton"

    def __init__(self, schedule: Schedule, peers: PeerGroup) -> None:
        super().__init__(schedule, peers)
        from ..triton_ref import pull_dispatch, push_combine

        self._pull_dispatch, self._push_combine = pull_dispatch, push_combine
        self._per_slot: set[str] = set()  # slot buffers widened from [slots] to [slots, 1]

    def publish(self, name: str, rank: int, local: torch.Tensor) -> PeerBuffer:
        return super().publish(name, rank, local if local.dim() > 1 else local.view(-1, 1))

    def slots(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        if len(shape) == 1:
            self._per_slot.add(name)
            shape = (*shape, 1)
        return super().slots(name, shape, dtype)

    def local(self, buf: PeerBuffer, rank: int) -> torch.Tensor:
        return buf[rank].view(-1) if buf.name in self._per_slot else buf[rank]

    def pull(self, rank: int, windows: list[Window], src: PeerBuffer, out: torch.Tensor, *, by_token: bool) -> None:
        if not by_token:
            raise ValueError("the Triton transport pulls per-slot values only with pull_grad_and_weight")
        start, end = windows[rank]
        self._pull_dispatch.pull_token_rows(self.tables[rank], start, max(end - start, 0), src, out)

    def pull_grad_and_weight(self, rank: int, windows: list[Window], grad_src: PeerBuffer, weight_src: PeerBuffer,
                             grad_out: torch.Tensor, weight_out: torch.Tensor) -> None:
        start, end = windows[rank]
        flat_weights = PeerBuffer(weight_src.name, weight_src.shape[:1], weight_src.dtype,
                                  [v.view(-1) for v in weight_src.views], weight_src.ptr_table, weight_src.remote)
        self._pull_dispatch.pull_reverse_combine(self.tables[rank], start, max(end - start, 0), grad_src,
                                                 flat_weights, grad_out, weight_out)

    def push(self, rank: int, windows: list[Window], values: torch.Tensor, dst: PeerBuffer) -> None:
        start, end = windows[rank]
        rows = values if values.dim() > 1 else values.view(-1, 1)
        self._push_combine.push_rows(self.tables[rank], start, max(end - start, 0), rows, dst)


PEER_TRANSPORTS = {"peers": PeerTransport, "peers-triton": TritonPeerTransport}

__all__ = ["PEER_TRANSPORTS", "PeerTransport", "Transport", "TritonPeerTransport", "Window"]
