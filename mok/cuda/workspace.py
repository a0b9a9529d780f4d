"""The megakernel's fixed buffers, allocated once per problem size and reused across calls.

MoK keeps its ring token buffer and its other communication buffers fixed: the CPU never resizes them and
never waits for the GPU to do so. :class:`Sm90Workspace` holds the same for the SM90 forward:

========================  =========================  ===========================================================
buffer                    shape, dtype               what
========================  =========================  ===========================================================
``ring_x``                [R * ring_rows, H] bf16    dispatched token rows (written by dispatch, read by TMA)
``ring_h``                [R * ring_rows, I] bf16    SwiGLU output rows (gate/up epilogue -> down GEMM)
``combine``               [R, T_local * K, H] bf16   combine slots (down epilogue push -> weighted sum); made by
                                                     the first launch that pushes (combine_slot_table): absent
                                                     when the top-1 combine is fused or every launch uses down_tma
``y``                     [R * capacity, H] bf16     down_tma's down rows in schedule order (TMA store -> weighted
                                                     sum); made by the first launch with down_tma (y_buffer)
``y_rows``                [R, T_local * K] int32     down_tma's inverse map, (token, k) -> row of y, written by the
                                                     down tasks of every launch (y_rows_buffer)
``counters``              [counter_ints] int32       dependency counters (zeroed in-stream by every launch)
``error``                 [8] int32                  error record (zeroed in-stream by every launch)
``combine_ptrs``          [R] int64                  peer pointer table of ``combine`` (made with it)
========================  =========================  ===========================================================

The per-call pointer tables (tokens, router weights, output: their addresses can change every call) come from
:func:`mok.comm.pointer_tables.stacked_pointer_table` (computed on the device, cached per address and stream).

A launch of one real rank (``WorkspaceKey.one_rank``, :mod:`mok.cuda.rank_run`) holds that rank's rings only
(``[ring_rows, H]`` and ``[ring_rows, I]``) and no ``combine``: its slots are symmetric peer memory. The counters
keep the all-rank layout.

Workspaces are cached by :class:`WorkspaceKey` (device, stream, sizes). Reuse on one stream is safe because
the stream orders the launches; the stream is part of the key so that two streams never share buffers. A layer
call inside a CUDA graph capture takes a private workspace made in the capture instead (``in_capture``; its memory
is the graph's), so replays and eager calls never share buffers, and a capture needs no eager call on its own
stream first (``torch.cuda.make_graphed_callables`` warms up on another stream than it captures on). The price
is memory: each captured layer call holds its own ring and counters, and y or the combine slots (gigabytes at the
anchors), beside the cached workspace its eager warm-up left. :func:`release_workspaces` frees the cache.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import torch

from ..comm.pointer_tables import stacked_pointer_table
from .errors import ERROR_WORDS

BLOCK_M = 128                  # the kernel's tile height (Sm90Tiles::kBlockM)
GATE_UP_COLUMNS = 128          # intermediate columns per gate/up task (Sm90Tiles::kHalfN)
DOWN_COLUMNS = 256             # hidden columns per down column block (Sm90Tiles::kBlockN)
COUNTER_TICKET_INTS = 32       # the ticket counter owns a 128-byte line (CounterLayout::make)
MAX_CACHED_WORKSPACES = 2      # least recently used ones beyond this are dropped


def counter_ints(num_ranks: int, capacity: int, minibatch_rows: int) -> int:
    """int32 words of the counter block: mirrors ``CounterLayout::make`` in workspace.cuh (checked against the
    compiled C++ by tests/test_cuda_compile.py)."""
    tiles_per_rank = capacity // BLOCK_M
    max_minibatches = math.ceil(capacity / minibatch_rows)
    return (COUNTER_TICKET_INTS + 2 * num_ranks * tiles_per_rank + 2 * num_ranks * max_minibatches + num_ranks
            + max_minibatches)


MAX_FIRST_DISPATCH_PARTS = 8  # Sm90Tiles::kMaxFirstDispatchParts: D(0)'s tasks per tile at most


def launch_tickets(num_ranks: int, capacity: int, hidden: int, intermediate: int, dispatch_tasks: bool,
                   combine_blocks: int, down_span: int = 1, first_dispatch_parts: int = 1,
                   minibatch_tiles: int = 0) -> int:
    """Tasks of one launch: mirrors ``launch_tickets`` in workspace.cuh (checked against the compiled C++ by
    tests/test_cuda_compile.py): per rank and tile a dispatch (ring mode), the gate/up column blocks and the down
    tasks (``down_span`` column blocks each), plus per rank ``combine_blocks``; the first minibatch's
    (``minibatch_tiles``) dispatches in ``first_dispatch_parts`` tasks each (so ``first_dispatch_parts`` counts only
    with ``minibatch_tiles`` given)."""
    tiles = capacity // BLOCK_M
    per_tile = int(dispatch_tasks) + -(-intermediate // GATE_UP_COLUMNS) + -(-hidden // DOWN_COLUMNS) // down_span
    first = num_ranks * min(minibatch_tiles, tiles) * (first_dispatch_parts - 1) if dispatch_tasks else 0
    return num_ranks * tiles * per_tile + first + num_ranks * combine_blocks


@dataclass(frozen=True)
class WorkspaceKey:
    """What a workspace's buffers depend on. ``stream`` is the CUDA stream handle (0 on a CPU)."""

    device: str
    stream: int
    num_ranks: int
    tokens_per_rank: int
    top_k: int
    hidden: int
    intermediate: int
    capacity: int
    minibatch_rows: int
    ring_rows: int
    fuse_top1: bool
    one_rank: bool = False  # one real rank per launch (mok.cuda.rank_run): its own ring only, slots in peer memory


def current_stream_handle(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0


class Sm90Workspace:
    """The fixed buffers of one problem size (see the module docstring). ``in_capture``: made inside a CUDA graph
    capture, for the captured launches only; its combine slots and y are then made unfilled (a NaN fill would be
    recorded and rerun on every replay, and every launch writes what it reads of them)."""

    def __init__(self, key: WorkspaceKey, *, in_capture: bool = False) -> None:
        self.key, self.in_capture = key, in_capture
        device = torch.device(key.device)
        r = key.num_ranks
        self.device = device
        own = 1 if key.one_rank else r  # ranks whose ring this launch holds
        self.ring_x = torch.empty(own * key.ring_rows, key.hidden, dtype=torch.bfloat16, device=device)
        self.ring_h = torch.empty(own * key.ring_rows, key.intermediate, dtype=torch.bfloat16, device=device)
        self.counters = torch.zeros(counter_ints(r, key.capacity, key.minibatch_rows), dtype=torch.int32,
                                    device=device)
        self.error = torch.zeros(ERROR_WORDS, dtype=torch.int32, device=device)
        # The combine slots and y are as large as all the down rows (gigabytes at the anchors) and a launch uses one
        # or the other (down_tma), so each is made on first use.
        self.combine = None
        self.combine_ptrs = None
        self.y = None
        self.y_rows = None

    def rank_pointer_table(self, stacked: torch.Tensor) -> torch.Tensor:
        """``[R]`` int64 peer pointer table of ``stacked`` ([R, ...], rank r's buffer is ``stacked[r]``): entry r
        is ``stacked[r]``'s address. Made on the device, no host synchronisation; read-only (it may be a cached
        table: :func:`mok.comm.pointer_tables.stacked_pointer_table`)."""
        if stacked.shape[0] != self.key.num_ranks:
            raise ValueError(f"expected {self.key.num_ranks} rank buffers stacked on dim 0, got {tuple(stacked.shape)}")
        return stacked_pointer_table(stacked)

    def combine_slot_table(self) -> torch.Tensor:
        """The ``[R]`` pointer table of the combine slots (bf16 ``[R, T_local * K, H]``: the down epilogue's push
        into each source rank's (token, k) slots), made on first use, NaN-filled so that a slot no launch wrote shows
        up. Not for a fused top-1 layer or one real rank's launch (their slots are the output, or peer memory)."""
        key = self.key
        if key.fuse_top1 or key.one_rank:
            raise ValueError("a fused top-1 layer or one real rank's launch has no workspace combine slots")
        if self.combine is None:
            self.combine = self._nan_filled(key.num_ranks, key.tokens_per_rank * key.top_k, key.hidden)
            self.combine_ptrs = self.rank_pointer_table(self.combine)
        return self.combine_ptrs

    def y_buffer(self) -> torch.Tensor:
        """bf16 ``[R * capacity, H]``: down_tma's down outputs in schedule order (row = schedule row), made on first
        use (the push into the combine slots needs none), NaN-filled so that a row no launch wrote shows up. As
        large as R times the slots when the capacity is the worst case of routing (the default), which is why it is
        not made unless asked for."""
        if self.y is None:
            key = self.key
            self.y = self._nan_filled(key.num_ranks * key.capacity, key.hidden)
        return self.y

    def _nan_filled(self, *shape: int) -> torch.Tensor:
        """bf16 NaN-filled (so an unwritten element shows up), or unfilled in a capture's workspace."""
        if self.in_capture:
            return torch.empty(shape, dtype=torch.bfloat16, device=self.device)
        return torch.full(shape, float("nan"), dtype=torch.bfloat16, device=self.device)

    def y_rows_buffer(self) -> torch.Tensor:
        """int32 ``[R, T_local * K]``: down_tma's inverse map, which its down tasks write in every launch (row of y
        holding each source rank's (token, k); mok.cuda.backend.y_rows_table computes the same in PyTorch), made with
        -1 on first use. The weighted sum checks each entry against the schedule tables and reports one that does not
        hold its (token, k) (outside y, or left at an earlier launch's row by an inconsistent schedule)."""
        if self.y_rows is None:
            key = self.key
            self.y_rows = torch.full((key.num_ranks, key.tokens_per_rank * key.top_k), -1, dtype=torch.int32,
                                     device=self.device)
        return self.y_rows

    def poison(self) -> None:
        """NaN-fill the ring, the combine slots and y, and -1 the inverse map (tests: a stale read or an unwritten
        slot or entry shows up)."""
        for t in (self.ring_x, self.ring_h, self.combine, self.y):
            if t is not None:
                t.fill_(float("nan"))
        if self.y_rows is not None:
            self.y_rows.fill_(-1)


_CACHE: "OrderedDict[WorkspaceKey, Sm90Workspace]" = OrderedDict()


def get_workspace(key: WorkspaceKey) -> Sm90Workspace:
    """The cached workspace for ``key`` (created on first use; least recently used ones are dropped)."""
    workspace = _CACHE.get(key)
    if workspace is None:
        while len(_CACHE) >= MAX_CACHED_WORKSPACES:
            _CACHE.popitem(last=False)
        workspace = _CACHE[key] = Sm90Workspace(key)
    else:
        _CACHE.move_to_end(key)
    return workspace


def cached_workspaces() -> list[Sm90Workspace]:
    return list(_CACHE.values())


def release_workspaces() -> None:
    """Drop every cached workspace (their memory returns to PyTorch's caching allocator)."""
    _CACHE.clear()
