"""``mok.moe(..., backend="triton")``: the Triton kernels composed into MoK's forward and backward.

The stages, per expert-side rank and ring minibatch (rank r owns tokens ``[r*T_local, (r+1)*T_local)`` and
experts ``[r*E_local, (r+1)*E_local)``; every rank's buffers are :class:`mok.comm.PeerBuffer` s that kernels
reach through their ``ptr_table``)::

    forward   publish x (and the router weights) on every source rank; barrier
              pull dispatch x -> ring        (pull_dispatch.pull_token_rows)
              gate/up GEMM + SwiGLU          (swiglu.gate_up_swiglu: gate_up -> ring, h -> scratch)
              down GEMM + push combine       (grouped_gemm.grouped_gemm_forward(push=...): y -> source slots)
      barrier, then on every source rank: out[t] = sum_k w[t,k] y[t,k]   (push_combine.weighted_sum_over_k)

    backward  publish dO; barrier; minibatches in reverse; replay (dispatch + gate/up) those the ring overwrote
              pull reverse-combine dO, w     (pull_dispatch.pull_reverse_combine)
              down dgrad + SwiGLU backward   (swiglu.down_dgrad_swiglu_backward: d_gate_up, w*h, dw partials)
              dx GEMM + push reverse-dispatch (grouped_gemm.grouped_gemm_dgrad(push=...): dx -> source slots)
              dw push reverse-dispatch       (push_combine.push_router_grad)
              weight gradients               (grouped_gemm.grouped_wgrad: one fixed-order chain per expert)
      barrier, then on every source rank: dx[t] = sum_k dx[t,k]           (push_combine.sum_over_k)

One implementation, two ways to run it. :class:`TritonRanksRun` drives the ranks a :class:`mok.comm.PeerGroup`
gives this process (``peers.local_ranks``) and calls ``peers.barrier()`` where ranks synchronise:

* :class:`TritonLayerRun` (``mok.moe(..., backend="triton", ep_size=R)``) drives all R ranks of an
  :class:`EmulatedRankGroup` in one process and one stream (the barrier is stream order). A rank's buffers are
  its share (dim-0 slice) of one tensor, so x, dO and the router weights are published in place (no copy),
  and the pointer tables of those equally spaced shares are computed on the device: no host synchronisation.
* :class:`TritonRankRun` (``mok.distributed.distributed_moe(..., backend="triton")``) drives one real rank of
  a group of processes (:class:`mok.comm.symm_mem.SymmetricMemoryPeers` on GPUs, ``HostSharedPeers`` on CPUs):
  it copies (or quantizes) x, dO and its router weights into the symmetric buffers and pulls from / pushes
  into its peers' buffers directly.

Both produce the same bits as each other and as every other EP degree: every row's arithmetic depends only on
the row and the weights, and each expert's weight-gradient chain walks its rows in one global order.

A run can also compute the gradients without its forward (:meth:`TritonRanksRun.backward_without_forward`:
the backward replays dispatch and gate/up for every minibatch, or, given the caller's saved gate/up rows, only
the dispatch; nothing else of the forward runs), for a caller whose output came from elsewhere
(``backend="cuda"``'s megakernel forward).

Host work per call. On small layers the host, not the GPU, sets the pace (round 10: ``backend="cuda"``'s
backward returned to the host after 2.55 ms for 2.02 ms of kernels), so a run does little besides launching:
a pass can take its scratch rows (and a backward without a forward its ring) from the buffers the previous pass
of the same sizes gave back on the same stream (:class:`PassBuffers`, opt-in), peer pointer tables come from a cache
(:func:`mok.comm.pointer_tables.pointer_table`), a ring column nobody reads is never allocated, and a run needs
only the schedule's four expert-side tables (:class:`RankTables`), so a caller holding just those (the
megakernel's) completes nothing. None of it changes a bit: every buffer reused is one the pass writes before it reads.

Minibatching. These kernels run stage by stage (no kernel overlaps communication with compute), so with
``MoKConfig.minibatch_rows`` and ``ring_rows`` both ``None`` each rank walks **one minibatch covering its whole
schedule table** (``capacity`` rows; kernels skip the tiles past the rows in use on the device), which needs
no host synchronisation at all. An explicit ``minibatch_rows`` or ``ring_rows`` is honoured exactly as the
reference backend does (:mod:`mok.ring`: forward in order, backward in reverse, overwritten minibatches
replayed); that needs each rank's rows in use on the host to count minibatches: one synchronisation per
forward. No result bit depends on the minibatching or on ``ep_size``.

Precision hook. How rows are stored and moved and which kernel runs each expert GEMM is a :class:`RowFormat`,
chosen per precision (:func:`register_row_format`). ``"bf16"`` and ``"fp32"`` use :class:`PlainRows` (rows
in the activation dtype). ``"mxfp8"`` uses :class:`mok.triton_ref.mxfp8_rows.MXFP8Rows`: MoK's MXFP8 mode.
The caller passes the usual bf16 weights; they are quantized once per weight version through the cache of
:meth:`mok.mxfp8.MXFP8Weights.quantize` (requantized only after an in-place update such as an optimizer
step). x and dO are quantized along H on their source rank and travel as packed FP8 rows plus E8M0 scales
(about half the bytes of bf16); the gate/up GEMM (+SwiGLU, + h quantized along I in its epilogue), the down
GEMM, the down dgrad (+SwiGLU backward) and the dx GEMM (on ``[d_gate|d_up]`` quantized along 2I) dequantize
their MXFP8 operands on chip and multiply in bf16 with fp32 accumulation; outputs, combine and the router
gradient are as in BF16. Weight gradients use bf16 operands (the exactly dequantized x and dO rows, bf16
``d_gate_up`` and ``w*h``) with fp32 accumulation: an MXFP8 wgrad would quantize along the token axis, which
is not done here.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..backends import Backend, backward_may_follow, register_backend
from ..backends.layer_run import LayerRunFunction
from ..checks import resolve_precision
from ..comm import EmulatedPeers, PeerBuffer, PeerGroup
from ..comm.pointer_tables import pointer_table
from ..config import MoKConfig
from ..heuristics import rank_minibatch_rows
from ..ring import RingBuffer, RingPlan, plan_ring
from ..schedule import RankTables, Schedule, build_schedule
from ._common import check_device, fresh, in_dtype, poison_, rows_of
from .grouped_gemm import grouped_gemm_dgrad, grouped_gemm_forward, grouped_wgrad
from .pull_dispatch import pull_reverse_combine, pull_token_rows
from .push_combine import SlotPush, push_router_grad, sum_over_k, weighted_sum_over_k
from .swiglu import down_dgrad_swiglu_backward, gate_up_swiglu, router_grad_partials


# ========================================================================================================
# Per-pass buffers, reused from one call to the next
# ========================================================================================================
# A pass's scratch rows (and the ring of a backward without its forward) are written and read inside that one
# call on one stream, and nothing of them is returned. Handing them to the next call of the same sizes on the
# same stream is as safe as torch.empty handing out the same freed block again (the stream orders the two
# calls), and saves the host an allocation each (round 10: the `cuda` backward is host-bound on small layers).
# A pass checks its buffers out (no other pass, e.g. another thread's, gets them meanwhile) and gives them
# back when it returns; never during a CUDA graph capture (the graph would go on using them at every replay).
# Bounded (least recently used sizes dropped first); off by default: MOK_TRITON_REUSE_BUFFERS=1 or
# set_buffer_reuse(True) turns it on, release_pass_buffers() empties it. Measured (round 11, H200, qwen EP-64
# slice, `cuda` backward): the host returned after 1.76 ms with reuse against 1.91 ms without, but the wall
# was 2.78 against 2.74 ms (the backward is no longer host-bound there), while the kept buffers hold about
# 0.5 GB (their sizes at that shape, not a measurement) that the next forward cannot use. So it stays opt-in,
# for host-bound callers.
_REUSE = {"on": os.environ.get("MOK_TRITON_REUSE_BUFFERS", "0") == "1"}
_FREE_BUFFERS: "OrderedDict[tuple, list[torch.Tensor]]" = OrderedDict()
# Tensors kept in all. A backward takes at most 11 (8 scratch, 3 chains) plus two ring columns per local rank,
# so an emulated group of more than two ranks keeps only part of its buffers (no bit changes, less reuse).
_FREE_BUFFERS_MAX = 16
_FREE_LOCK = threading.Lock()


def set_buffer_reuse(enabled: bool) -> bool:
    """Reuse per-pass buffers across calls (see above; default off). Returns the previous setting."""
    previous = _REUSE["on"]
    _REUSE["on"] = bool(enabled)
    return previous


def release_pass_buffers() -> None:
    """Drop every kept per-pass buffer (their memory returns to PyTorch's caching allocator)."""
    with _FREE_LOCK:
        _FREE_BUFFERS.clear()


def free_pass_buffers() -> dict[tuple, list[torch.Tensor]]:
    """The kept per-pass buffers (a copy), by ``(device, stream, shape, dtype)``: for tests."""
    with _FREE_LOCK:
        return {key: list(free) for key, free in _FREE_BUFFERS.items()}


class PassBuffers:
    """The buffers one pass (a forward, a backward) allocates for its own use, taken from the kept ones of
    the same device, stream, shape and dtype where allowed, and kept again by :meth:`give_back`.

    Built at the start of the pass, on the stream the pass launches on. A pass that raises gives nothing
    back (kernels it queued may still use them; the caching allocator then frees them in stream order).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.reuse = _REUSE["on"]
        self.stream = 0
        if self.reuse and device.type == "cuda":
            with torch.cuda.device(device):
                self.reuse = not torch.cuda.is_current_stream_capturing()
                self.stream = torch.cuda.current_stream(device).cuda_stream
        self._taken: list[tuple[tuple, torch.Tensor]] = []

    def take(self, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A ``shape`` tensor of ``dtype`` for this pass only, contents undefined (poisoned when poisoning
        is on, as :func:`fresh`)."""
        shape = tuple(int(s) for s in shape)
        if not self.reuse:
            return fresh(shape, dtype, self.device)
        key = (str(self.device), self.stream, shape, dtype)
        with _FREE_LOCK:
            free = _FREE_BUFFERS.get(key)
            tensor = free.pop() if free else None
            if free is not None and not free:
                del _FREE_BUFFERS[key]
        tensor = poison_(tensor) if tensor is not None else fresh(shape, dtype, self.device)
        self._taken.append((key, tensor))
        return tensor

    def give_back(self) -> None:
        """Keep this pass's buffers for the next pass on the same stream (call once the pass has queued its
        last kernel that touches them; nothing of the pass may use them afterwards)."""
        taken, self._taken = self._taken, []
        if not taken:
            return
        with _FREE_LOCK:
            for key, tensor in taken:
                _FREE_BUFFERS.setdefault(key, []).append(tensor)
                _FREE_BUFFERS.move_to_end(key)
            kept = sum(len(free) for free in _FREE_BUFFERS.values())
            while kept > _FREE_BUFFERS_MAX:
                oldest = next(iter(_FREE_BUFFERS))
                _FREE_BUFFERS[oldest].pop(0)
                if not _FREE_BUFFERS[oldest]:
                    del _FREE_BUFFERS[oldest]
                kept -= 1


class EmulatedRankGroup(EmulatedPeers):
    """:class:`mok.comm.EmulatedPeers` for one layer run: rank r's buffer is the r-th dim-0 slice of one
    allocation (so a rank's share of x or dO can be published in place, :meth:`wrap`), pointer tables travel
    without a host synchronisation, and fresh buffers are poisoned when poisoning is on."""

    def __init__(self, world_size: int, device: torch.device | str) -> None:
        super().__init__(world_size, device)
        self._blocks: dict[str, torch.Tensor] = {}

    def buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        shape = tuple(int(s) for s in shape)
        existing = self._buffers.get(name)
        if existing is not None and existing.shape == shape and existing.dtype == dtype:
            return existing
        block = poison_(torch.empty((self.world_size * shape[0], *shape[1:]), dtype=dtype, device=self.device))
        buf = self.wrap(name, block)
        self._buffers[name] = buf
        return buf

    def wrap(self, name: str, tensor: torch.Tensor) -> PeerBuffer:
        """A :class:`PeerBuffer` whose rank r is the r-th of ``world_size`` equal dim-0 slices of ``tensor``
        (contiguous; used in place, no copy)."""
        if not tensor.is_contiguous() or tensor.shape[0] % self.world_size:
            raise ValueError(f"{name}: a contiguous tensor with a multiple of {self.world_size} rows is needed")
        if self.world_size == 1 or not tensor.shape[0]:
            views = [tensor] * self.world_size  # one rank: its share is the whole tensor (no view to make)
        else:
            views = list(tensor.chunk(self.world_size))
        self._blocks[name] = tensor
        return PeerBuffer(name, tuple(views[0].shape), tensor.dtype, views, pointer_table(views, tensor.device))

    def block(self, buf: PeerBuffer) -> torch.Tensor:
        """Every rank's buffer ``buf`` as one tensor (rank-major)."""
        return self._blocks[buf.name]



# ========================================================================================================
# Precision hook: how rows are stored and moved, and which kernel runs each expert GEMM
# ========================================================================================================
@dataclass(frozen=True)
class Window:
    """Rows ``[start, start + n_rows)`` of one expert-side rank's schedule table (a ring minibatch).

    ``tile_expert`` is the table's tile -> local expert map from the window's first tile on; ``rows_in_use``
    (int32 ``[1]``, on the device) is the table's rows in use, for kernels that skip rows past it.
    """

    table: RankTables
    start: int
    n_rows: int
    tile_expert: torch.Tensor
    tile: int

    @property
    def rows_in_use(self) -> torch.Tensor:
        return self.table.segment_offsets[-1:]


Scratch = Callable[[str, int, torch.dtype], torch.Tensor]
"""``scratch(name, width, dtype)``: a ``[minibatch rows, width]`` buffer, the same one for every minibatch
of a pass (stream order serialises the minibatches that share it)."""


class RowFormat:
    """One precision's data flow: how token rows (x, dO, h) are stored and moved, and which kernel runs each
    expert GEMM. Every method works on one :class:`Window`; ``weights`` is what :meth:`prepare_weights` made,
    cut to one rank's experts by :meth:`local_weights`."""

    def row_storage(self, width: int, dtype: torch.dtype) -> tuple[int, torch.dtype]:
        """How a row of ``width`` activation values is stored (columns, dtype): in published buffers, the
        ring and scratch."""
        raise NotImplementedError

    def encode(self, values: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        """Rows ``[R, width]`` (activation dtype) in storage form, into ``out`` if given (a source rank
        publishing its x or dO). May return ``values`` itself when they are already in storage form."""
        raise NotImplementedError

    def prepare_weights(self, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *,
                        backward: bool) -> Any:
        """This process's experts' weights (``[E_here, I, H]``, ``[E_here, H, I]``) as the GEMMs read them."""
        raise NotImplementedError

    def local_weights(self, weights: Any, start: int, stop: int) -> Any:
        """Experts ``[start, stop)`` of ``weights`` (views)."""
        raise NotImplementedError

    def gate_up(self, win: Window, x_rows: torch.Tensor, weights: Any, gate_up_out: torch.Tensor,
                h_out: torch.Tensor | None) -> None:
        """Gate/up GEMM + SwiGLU: ``gate_up_out`` (activation dtype ``[n, 2I]``) and ``h_out`` (stored rows of
        width I, or None in a backward replay)."""
        raise NotImplementedError

    def down(self, win: Window, h_rows: torch.Tensor, weights: Any, push: SlotPush) -> None:
        """Down GEMM ``y = h W_down^T``, each row pushed into its source slot (the forward combine)."""
        raise NotImplementedError

    def router_grad_partials(self, intermediate: int, hidden: int, dtype: torch.dtype, tile: int) -> int:
        """Columns of the router-gradient partials :meth:`down_dgrad_swiglu` writes."""
        raise NotImplementedError

    def down_dgrad_swiglu(self, win: Window, grad_rows: torch.Tensor, weights: Any, weight_rows: torch.Tensor,
                          gate_up: torch.Tensor, d_gate_up_out: torch.Tensor, hw_out: torch.Tensor,
                          dw_partial_out: torch.Tensor) -> None:
        """``g = dO W_down`` with the SwiGLU backward and router-gradient partials (stored dO rows in)."""
        raise NotImplementedError

    def dx(self, win: Window, d_gate_up: torch.Tensor, weights: Any, push: SlotPush, scratch: Scratch) -> None:
        """``dx = [d_gate|d_up] W_gate_up``, each row pushed into its source slot (reverse dispatch)."""
        raise NotImplementedError

    def values(self, win: Window, rows: torch.Tensor, width: int, scratch: Scratch, name: str) -> torch.Tensor:
        """Stored rows (x in the ring, pulled dO) as activation-dtype values: the weight gradients' operands."""
        raise NotImplementedError


class PlainRows(RowFormat):
    """bf16 / fp32: rows travel and are multiplied in the activation dtype (fp32 accumulation)."""

    def row_storage(self, width, dtype):
        return width, dtype

    def encode(self, values, out=None):
        if out is None:
            return values
        out.copy_(values)
        return out

    def prepare_weights(self, w_gate, w_up, w_down, *, backward):
        return w_gate.contiguous(), w_up.contiguous(), w_down.contiguous()

    def local_weights(self, weights, start, stop):
        # Every expert (one rank): the tensors themselves, no slice to make.
        return tuple(w if (start, stop) == (0, w.shape[0]) else w[start:stop] for w in weights)

    def gate_up(self, win, x_rows, weights, gate_up_out, h_out):
        gate_up_swiglu(x_rows, weights[0], weights[1], win.tile_expert, win.tile, gate_up_out=gate_up_out,
                       h_out=h_out, n_rows=win.n_rows)

    def down(self, win, h_rows, weights, push):
        grouped_gemm_forward(h_rows, weights[2], win.tile_expert, win.tile, n_rows=win.n_rows, push=push)

    def router_grad_partials(self, intermediate, hidden, dtype, tile):
        return router_grad_partials(intermediate, hidden, dtype, tile)

    def down_dgrad_swiglu(self, win, grad_rows, weights, weight_rows, gate_up, d_gate_up_out, hw_out,
                          dw_partial_out):
        down_dgrad_swiglu_backward(grad_rows, weights[2], weight_rows, gate_up, win.tile_expert, win.tile,
                                   d_gate_up_out=d_gate_up_out, hw_out=hw_out, dw_partial_out=dw_partial_out,
                                   n_rows=win.n_rows)

    def dx(self, win, d_gate_up, weights, push, scratch):
        grouped_gemm_dgrad(d_gate_up, (weights[0], weights[1]), win.tile_expert, win.tile, n_rows=win.n_rows,
                           push=push)

    def values(self, win, rows, width, scratch, name):
        return rows


def _mxfp8_rows() -> RowFormat:
    # Imported on first use: mxfp8_rows builds on this module.
    return importlib.import_module(".mxfp8_rows", __package__).MXFP8Rows()


_ROW_FORMATS: dict[str, Callable[[], RowFormat]] = {"bf16": PlainRows, "fp32": PlainRows, "mxfp8": _mxfp8_rows}


def register_row_format(precision: str, factory: Callable[[], RowFormat]) -> None:
    """Make ``precision`` use rows of ``factory()`` (add it to the backend's precisions separately)."""
    _ROW_FORMATS[precision] = factory


def row_format(precision: str) -> RowFormat:
    if precision not in _ROW_FORMATS:
        raise ValueError(f"the triton backend has no row format for precision={precision!r}; "
                         f"registered: {sorted(_ROW_FORMATS)}")
    return _ROW_FORMATS[precision]()


# ========================================================================================================
# One forward and its backward, for the ranks this process drives
# ========================================================================================================
class TritonRanksRun:
    """One forward (and its backward) of the layer for the ranks ``peers.local_ranks`` (consecutive), which
    hold what the backward needs.

    Args:
        x: ``[L * T_local, H]`` the local ranks' tokens in rank order (L = ``len(peers.local_ranks)``).
        topk_ids: ``[world * T_local, K]`` the global routing (every rank's ids, rank order).
        topk_weights: ``[L * T_local, K]`` router weights of the local ranks' tokens (made fp32).
        w_gate, w_up: ``[L * E_local, I, H]``; w_down: ``[L * E_local, H, I]``: the local ranks' experts.
        peers: an :class:`EmulatedRankGroup` (every rank local) or a group with one local rank.
        world: the EP degree; num_experts: E (global); config: :class:`MoKConfig`; precision: a registered
            :class:`RowFormat` name.
        backward: whether a backward may follow (MXFP8 then quantizes the weights' dgrad orientations too).
        schedule: the routing's schedule if the caller has it already, else built here: a
            :class:`mok.schedule.Schedule`, or only its expert-side tables (:class:`RankTables`; e.g.
            ``backend="cuda"``'s :class:`mok.cuda.schedule_tables.KernelSchedule`, which needs no completing).
    """

    def __init__(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate: torch.Tensor,
                 w_up: torch.Tensor, w_down: torch.Tensor, *, peers: PeerGroup, world: int, num_experts: int,
                 config: MoKConfig, precision: str, backward: bool = True, schedule: Schedule | None = None) -> None:
        check_device(x)
        self.peers = peers
        self.local_ranks = list(peers.local_ranks)
        self.emulated = isinstance(peers, EmulatedRankGroup)
        if not self.emulated and len(self.local_ranks) != 1:
            raise ValueError("a peer group drives every rank (EmulatedRankGroup) or exactly one")
        if self.local_ranks != list(range(self.local_ranks[0], self.local_ranks[0] + len(self.local_ranks))):
            raise ValueError(f"the local ranks must be consecutive, got {self.local_ranks}")
        if peers.world_size != world:
            raise ValueError(f"the peer group has {peers.world_size} ranks, the layer {world}")
        self.format = row_format(precision)
        self.dtype, self.device = x.dtype, x.device
        self.world = world
        n_local = len(self.local_ranks)
        self.tokens_local = x.shape[0] // n_local
        self.hidden = x.shape[1]
        self.num_experts = num_experts
        self.local_experts = num_experts // world
        self.intermediate = w_gate.shape[1]
        self.top_k = topk_ids.shape[1]
        self.tile = config.expert_padding
        self.weight_dtype = w_gate.dtype
        self.x = x.contiguous()
        self.topk_weights = in_dtype(topk_weights, torch.float32).contiguous()

        weights = self.format.prepare_weights(w_gate, w_up, w_down, backward=backward)
        el = self.local_experts
        self.weights = {r: self.format.local_weights(weights, j * el, (j + 1) * el)
                        for j, r in enumerate(self.local_ranks)}

        if schedule is None:
            schedule = build_schedule(topk_ids, num_experts, world, self.tile, config.capacity_rows)
        elif (schedule.ep_size, schedule.num_experts, schedule.tile, schedule.top_k) != (world, num_experts, self.tile,
                                                                                       self.top_k):
            raise ValueError("the given schedule was built for another layer (EP degree, experts, tile or top-k)")
        self.schedule = schedule
        self.tables = {r: RankTables.of(schedule, r) for r in self.local_ranks}
        self.all_plans = self._plan_rings(config)
        self.plans = {r: self.all_plans[r] for r in self.local_ranks}
        # Made by the pass that fills them first (forward(), or backward_without_forward() with only the
        # columns it reads), so that a run that never needs a ring column never allocates it.
        self.rings: dict[int, RingBuffer] = {}
        self._rings_given_back = False
        self.scratch_rows = max(plan.minibatch_rows for plan in self.plans.values())
        self.x_buf: PeerBuffer | None = None
        self.weight_buf: PeerBuffer | None = None

    def _plan_rings(self, config: MoKConfig) -> list[RingPlan]:
        """Every rank's ring plan (all ranks agree on them; a rank uses its own)."""
        capacity = self.schedule.capacity
        if config.minibatch_rows is None and config.ring_rows is None:
            # One minibatch over the whole table: no host synchronisation (module docstring).
            return [RingPlan(capacity, capacity, capacity) for _ in range(self.world)]
        mb_rows = rank_minibatch_rows(self.tokens_local, self.hidden, self.intermediate, self.local_experts,
                                      self.top_k, self.device, config)
        # RingPlan checks that the ring holds whole minibatches. NOTE: host synchronisation: the host walks the
        # ring, so it needs each rank's minibatch count. (Schedule.rows_used() inline: a KernelSchedule has none.)
        rows_used = [int(v) for v in self.schedule.segment_offsets[:, -1].tolist()]  # each rank's rows in use
        return [plan_ring(rows, mb_rows, config.ring_rows) for rows in rows_used]

    def _make_rings(self, columns: dict[str, tuple[int, torch.dtype]],
                    buffers: PassBuffers | None = None) -> None:
        """Every local rank's ring of ``columns`` (name -> (width, dtype)): fresh tensors, or taken from
        ``buffers`` for a ring that lives no longer than that pass."""
        self.rings = {}
        for r, plan in self.plans.items():
            ring = RingBuffer(plan, {}, self.device)
            for name, (width, dtype) in columns.items():
                ring.tensors[name] = (buffers.take((plan.ring_rows, width), dtype) if buffers is not None
                                      else fresh((plan.ring_rows, width), dtype, self.device))
            self.rings[r] = ring

    def _ring_columns(self, gate_up: bool = True) -> dict[str, tuple[int, torch.dtype]]:
        columns = {"x": self.format.row_storage(self.hidden, self.dtype)}
        if gate_up:
            columns["gate_up"] = (2 * self.intermediate, self.dtype)
        return columns

    # ----------------------------------------------------------------------------------------------------
    # Peer buffers
    # ----------------------------------------------------------------------------------------------------
    def _publish(self, name: str, local: torch.Tensor) -> PeerBuffer:
        """Expose the local ranks' ``local`` (rank-major along dim 0) to every rank."""
        if self.emulated:
            return self.peers.wrap(name, local.contiguous())
        buf = self.peers.buffer(name, tuple(local.shape), local.dtype)
        buf[self.local_ranks[0]].copy_(local)
        return buf

    def _publish_rows(self, name: str, values: torch.Tensor) -> PeerBuffer:
        """Expose token rows ``[L * T_local, width]`` (x or dO) in the format's storage form."""
        if self.emulated:
            return self.peers.wrap(name, self.format.encode(values.contiguous()))
        width, dtype = self.format.row_storage(values.shape[1], values.dtype)
        buf = self.peers.buffer(name, (self.tokens_local, width), dtype)
        self.format.encode(values, out=buf[self.local_ranks[0]])
        return buf

    def _slots(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> PeerBuffer:
        """Per-(token, k) slots ``shape`` on every rank; each slot has exactly one writer, so no clearing."""
        buf = self.peers.buffer(name, shape, dtype)
        if not self.emulated:
            poison_(buf[self.local_ranks[0]])
        return buf

    def _local(self, buf: PeerBuffer) -> torch.Tensor:
        """The local ranks' buffers ``buf`` as one tensor (rank-major)."""
        return self.peers.block(buf) if self.emulated else buf[self.local_ranks[0]]

    def _scratch(self, buffers: PassBuffers) -> Scratch:
        made: dict[str, torch.Tensor] = {}

        def scratch(name: str, width: int, dtype: torch.dtype) -> torch.Tensor:
            if name not in made:
                made[name] = buffers.take((self.scratch_rows, width), dtype)
            return made[name]
        return scratch

    # ----------------------------------------------------------------------------------------------------
    # Shared steps
    # ----------------------------------------------------------------------------------------------------
    def _window(self, rank: int, i: int) -> Window:
        start, end = self.plans[rank].window(i)
        table = self.tables[rank]
        tile_expert = rows_of(table.tile_expert, slice(start // self.tile, None))
        return Window(table, start, end - start, tile_expert, self.tile)

    def _ring_rows(self, rank: int, i: int) -> dict[str, torch.Tensor]:
        ring = self.rings[rank]
        return {name: ring.rows(name, i) for name in ring.tensors}

    def _dispatch_and_project(self, rank: int, i: int, h_out: torch.Tensor | None) -> None:
        """Pull minibatch i's token rows into the ring and run the gate/up GEMM (+ SwiGLU) on them."""
        win = self._window(rank, i)
        ring_rows = self._ring_rows(rank, i)
        pull_token_rows(win.table, win.start, win.n_rows, self.x_buf, ring_rows["x"])
        self.format.gate_up(win, ring_rows["x"], self.weights[rank], ring_rows["gate_up"], h_out)
        self.rings[rank].claim(i)

    def _per_local_rank(self, rows: torch.Tensor) -> dict[int, torch.Tensor]:
        """``[L * capacity, width]`` rows as each local rank's ``[capacity, width]`` (one rank: the tensor itself)."""
        if len(self.local_ranks) == 1:
            return {self.local_ranks[0]: rows}
        return dict(zip(self.local_ranks, rows.view(len(self.local_ranks), self.schedule.capacity, -1)))

    def _own_tokens(self, j: int) -> slice:
        return slice(j * self.tokens_local, (j + 1) * self.tokens_local)

    def _own_slots(self, j: int) -> slice:
        return slice(j * self.tokens_local * self.top_k, (j + 1) * self.tokens_local * self.top_k)

    # ----------------------------------------------------------------------------------------------------
    # Forward
    # ----------------------------------------------------------------------------------------------------
    def forward(self) -> torch.Tensor:
        """``[L * T_local, H]`` in x's dtype: the local ranks' tokens' outputs."""
        if self.rings:
            raise RuntimeError("this TritonRanksRun has run already: one forward() per run")
        slots = self.tokens_local * self.top_k
        self.x_buf = self._publish_rows("triton_x", self.x)
        self.weight_buf = self._publish("triton_topk_weights", self.topk_weights.view(-1))
        combine = self._slots("triton_combine_slots", (slots, self.hidden), self.dtype)
        self._make_rings(self._ring_columns())  # fresh: the backward reads what the forward leaves there
        self.peers.barrier()  # every rank's x is published, and nobody still reads last call's slots

        buffers = PassBuffers(self.device)
        scratch = self._scratch(buffers)
        h = scratch("h", *self.format.row_storage(self.intermediate, self.dtype))
        for rank in self.local_ranks:
            for i in self.plans[rank].forward_order():
                self._dispatch_and_project(rank, i, h_out=h)
                win = self._window(rank, i)
                self.format.down(win, h, self.weights[rank], SlotPush.window(win.table, win.start, combine))
        buffers.give_back()  # every kernel reading h is queued
        self.peers.barrier()  # every rank's pushes have landed

        out = fresh((len(self.local_ranks) * self.tokens_local, self.hidden), self.dtype, self.device)
        combined = self._local(combine)
        for j in range(len(self.local_ranks)):
            weighted_sum_over_k(rows_of(combined, self._own_slots(j)), rows_of(self.topk_weights, self._own_tokens(j)),
                                rows_of(out, self._own_tokens(j)))
        return out

    # ----------------------------------------------------------------------------------------------------
    # Backward
    # ----------------------------------------------------------------------------------------------------
    def backward(self, grad_out: torch.Tensor):
        """Gradients from ``grad_out`` ``[L * T_local, H]``: ``(dx [L*T_local, H], d_topk_weights fp32
        [L*T_local, K], d_w_gate, d_w_up [L*E_local, I, H], d_w_down [L*E_local, H, I])``."""
        if not self.rings or self._rings_given_back:
            raise RuntimeError("backward() follows this run's forward(); a run without one computes its gradients "
                               "once, with backward_without_forward()")
        if not self.emulated:
            # Another layer sharing the peer buffers may have used them since the forward: publish again what
            # the peers read (x only if some rank replays minibatches its ring has overwritten).
            if any(plan.num_minibatches > plan.num_slots for plan in self.all_plans):
                self.x_buf = self._publish_rows("triton_x", self.x)
            self.weight_buf = self._publish("triton_topk_weights", self.topk_weights.view(-1))
        buffers = PassBuffers(self.device)
        grads = self._backward_pass(grad_out, buffers)
        buffers.give_back()
        return grads

    def backward_without_forward(self, grad_out: torch.Tensor, saved_gate_up: torch.Tensor | None = None):
        """The gradients of :meth:`backward` (same bits, same tuple) on a run whose :meth:`forward` never ran.

        For a caller that computed the output some other way (``backend="cuda"``'s megakernel forward): of
        the forward's work the backward needs only each minibatch's dispatched x rows and gate/up rows, so
        nothing else is recomputed (no down GEMM, combine pushes or weighted sum). The rings hold nothing yet
        (:meth:`mok.ring.RingBuffer.holds` is False everywhere), so the backward's reverse walk replays the
        dispatch and gate/up GEMM of every minibatch into its slot just before using it, exactly as it
        replays the minibatches a forward overwrote. Collective like :meth:`backward`: every rank calls it.

        ``saved_gate_up``: the forward's gate/up pre-activations of every schedule row, bf16 ``[L * capacity,
        2I]`` (row ``j * capacity + i`` = row i of the j-th local rank's table; gate columns ``[0, I)``, up
        ``[I, 2I)``), e.g. written by ``backend="cuda"``'s megakernel. Then the replays only pull the token rows
        (the weight gradients need them) and the gate/up GEMM does not run again at all; the gradients are then
        those of these gate/up values (bitwise the Triton forward's only if it wrote them).
        """
        if self.rings:
            raise RuntimeError("forward() (or backward_without_forward()) has run on this TritonRanksRun: call "
                               "backward() after a forward, or make a new run")
        saved = None
        if saved_gate_up is not None:
            shape = (len(self.local_ranks) * self.schedule.capacity, 2 * self.intermediate)
            if tuple(saved_gate_up.shape) != shape or saved_gate_up.dtype != self.dtype \
                    or saved_gate_up.device != self.device:
                raise ValueError(f"saved_gate_up must be {self.dtype} {list(shape)} on {self.device}, got "
                                 f"{saved_gate_up.dtype} {list(saved_gate_up.shape)} on {saved_gate_up.device}")
            saved = self._per_local_rank(saved_gate_up)
        # What the replays and the reverse combine read from every source rank, as forward() publishes it.
        self.x_buf = self._publish_rows("triton_x", self.x)
        self.weight_buf = self._publish("triton_topk_weights", self.topk_weights.view(-1))
        # The rings live only in this call (they start empty: every minibatch is replayed into its slot), so
        # they come from the reused buffers too; no gate/up column when the saved rows take its place.
        buffers = PassBuffers(self.device)
        self._make_rings(self._ring_columns(gate_up=saved is None), buffers)
        grads = self._backward_pass(grad_out, buffers, saved)
        buffers.give_back()
        for ring in self.rings.values():
            ring.tensors.clear()  # handed on: nothing of this run may read them again
        self._rings_given_back = True
        return grads

    def _backward_pass(self, grad_out: torch.Tensor, buffers: PassBuffers,
                       saved_gate_up: dict[int, torch.Tensor] | None = None):
        """:meth:`backward` once x (for replays) and the router weights are published; its scratch from
        ``buffers`` (the caller gives them back); ``saved_gate_up``: per local rank, its table's gate/up rows
        (:meth:`backward_without_forward`), read instead of the ring's."""
        fmt, dtype, device, inter, hidden = self.format, self.dtype, self.device, self.intermediate, self.hidden
        slots = self.tokens_local * self.top_k
        grad_buf = self._publish_rows("triton_grad_out", in_dtype(grad_out, dtype))
        dw_slots = self._slots("triton_dw_slots", (slots,), torch.float32)
        dx_slots = self._slots("triton_dx_slots", (slots, hidden), dtype)
        self.peers.barrier()  # every rank's dO is published, and nobody still reads last call's slots

        n_experts_here = len(self.local_ranks) * self.local_experts
        d_w_gate = fresh((n_experts_here, inter, hidden), self.weight_dtype, device)
        d_w_up = fresh((n_experts_here, inter, hidden), self.weight_dtype, device)
        d_w_down = fresh((n_experts_here, hidden, inter), self.weight_dtype, device)

        # Per-minibatch scratch, reused by every minibatch of every local rank (stream order serialises them).
        scratch = self._scratch(buffers)
        grad_rows = scratch("grad_rows", *fmt.row_storage(hidden, dtype))
        weight_rows = buffers.take((self.scratch_rows,), torch.float32)
        d_gate_up = scratch("d_gate_up", 2 * inter, dtype)
        d_gate, d_up = d_gate_up.tensor_split(2, dim=1)  # the wgrads' G operands, made once per pass
        hw = scratch("hw", inter, dtype)
        dw_partial = scratch("dw_partial", fmt.router_grad_partials(inter, hidden, dtype, self.tile), torch.float32)
        # fp32 running sums of the weight gradients, only when an expert's chain spans several minibatches.
        chained = any(plan.num_minibatches > 1 for plan in self.plans.values())
        el = self.local_experts
        chains = ({"gate": buffers.take((el, inter, hidden), torch.float32),
                   "up": buffers.take((el, inter, hidden), torch.float32),
                   "down": buffers.take((el, hidden, inter), torch.float32)} if chained else {})

        for j, rank in enumerate(self.local_ranks):
            table, ring, weights = self.tables[rank], self.rings[rank], self.weights[rank]
            experts = slice(j * el, (j + 1) * el)
            rank_d_w_gate, rank_d_w_up, rank_d_w_down = (rows_of(g, experts) for g in (d_w_gate, d_w_up, d_w_down))
            order = list(self.plans[rank].backward_order())
            if not order:  # no rows reach this rank: its experts get no gradient
                for grad in (rank_d_w_gate, rank_d_w_up, rank_d_w_down):
                    grad.zero_()
                continue
            for step, i in enumerate(order):
                win = self._window(rank, i)
                ring_rows = self._ring_rows(rank, i)
                if saved_gate_up is not None:  # gate/up from the caller's forward: only the token rows again
                    if not ring.holds(i):
                        pull_token_rows(win.table, win.start, win.n_rows, self.x_buf, ring_rows["x"])
                        ring.claim(i)
                    ring_rows["gate_up"] = rows_of(saved_gate_up[rank], slice(win.start, win.start + win.n_rows))
                elif not ring.holds(i):
                    self._dispatch_and_project(rank, i, h_out=None)  # overwritten (or never run): replay

                # ---- pull reverse-combine, then the fused down dgrad + SwiGLU backward ----------------
                pull_reverse_combine(table, win.start, win.n_rows, grad_buf, self.weight_buf, grad_rows,
                                     weight_rows)
                fmt.down_dgrad_swiglu(win, grad_rows, weights, weight_rows, ring_rows["gate_up"], d_gate_up, hw,
                                      dw_partial)

                # ---- dx GEMM with the push reverse-dispatch epilogue; dw push --------------------------
                fmt.dx(win, d_gate_up, weights, SlotPush.window(table, win.start, dx_slots), scratch)
                push_router_grad(table, win.start, win.n_rows, dw_partial, dw_slots)

                # ---- weight gradients: continue each expert's fixed-order chain -----------------------
                # routed_rows: a rank receives as many rows as it sends on average (a kernel hint, not the bits)
                chain_args = dict(load_chain=step > 0, store_final=step == len(order) - 1,
                                  routed_rows=self.tokens_local * self.top_k)
                x_rows = fmt.values(win, ring_rows["x"], hidden, scratch, "x_values")
                g_rows = fmt.values(win, grad_rows, hidden, scratch, "grad_values")
                seg = table.segment_offsets
                grouped_wgrad(d_gate, x_rows, seg, win.start, win.n_rows, self.tile,
                              out=rank_d_w_gate, chain=chains.get("gate"), **chain_args)
                grouped_wgrad(d_up, x_rows, seg, win.start, win.n_rows, self.tile,
                              out=rank_d_w_up, chain=chains.get("up"), **chain_args)
                grouped_wgrad(g_rows, hw, seg, win.start, win.n_rows, self.tile,
                              out=rank_d_w_down, chain=chains.get("down"), **chain_args)
        self.peers.barrier()  # every rank's pushes have landed

        dx = fresh((len(self.local_ranks) * self.tokens_local, hidden), dtype, device)
        dx_local = self._local(dx_slots)
        for j in range(len(self.local_ranks)):
            sum_over_k(rows_of(dx_local, self._own_slots(j)), self.top_k, rows_of(dx, self._own_tokens(j)))
        d_weights = self._local(dw_slots).view(-1, self.top_k)
        if not self.emulated:
            d_weights = d_weights.clone()  # the slot buffer is reused by the next call
        return dx, d_weights, d_w_gate, d_w_up, d_w_down


class TritonLayerRun(TritonRanksRun):
    """``mok.moe(..., backend="triton", ep_size=R)``: every rank of an :class:`EmulatedRankGroup` driven by
    this process (global x ``[T, H]``, routing, router weights and weights ``[E, ...]``)."""

    def __init__(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate: torch.Tensor,
                 w_up: torch.Tensor, w_down: torch.Tensor, ep_size: int, config: MoKConfig, precision: str, *,
                 backward: bool = True, schedule: Schedule | None = None) -> None:
        super().__init__(x, topk_ids, topk_weights, w_gate, w_up, w_down, peers=EmulatedRankGroup(ep_size, x.device),
                         world=ep_size, num_experts=w_gate.shape[0], config=config, precision=precision,
                         backward=backward, schedule=schedule)


class TritonRankRun(TritonRanksRun):
    """One real rank of ``mok.distributed.distributed_moe(..., backend="triton")`` (one process per rank).

    The constructor of :class:`mok.distributed.RankLayerRun`: ``x_local`` ``[T_local, H]``, the global
    ``topk_ids`` ``[world * T_local, K]``, fp32 ``topk_weights_local`` ``[T_local, K]``, this rank's experts
    (``[E_local, I, H]``, ``[E_local, H, I]``). ``transport`` must be ``"peers"`` (or ``"peers-triton"``: the
    same thing here); ``peers`` is the group whose buffers the kernels read and write (default:
    :func:`mok.distributed.default_peers` of ``group``). ``precision``: ``None`` (x's dtype), ``"bf16"``,
    ``"fp32"`` or ``"mxfp8"``. ``schedule``: the routing's schedule if the caller has it, as
    :class:`TritonRanksRun` takes it (``backend="cuda"``: the megakernel's ``KernelSchedule``), else built here.
    ``forward()`` -> ``[T_local, H]``; ``backward(grad)`` -> ``(dx, d_topk_weights, d_w_gate, d_w_up, d_w_down)``
    of this rank. Collective: every rank constructs, runs forward and backward.
    """

    TRANSPORTS = ("peers", "peers-triton")  # the kernels read peer memory themselves: no collective transport

    def __init__(self, x_local: torch.Tensor, topk_ids: torch.Tensor, topk_weights_local: torch.Tensor,
                 w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, rank: int, world: int,
                 num_experts: int, config: MoKConfig, transport: str = "peers", group=None,
                 peers: PeerGroup | None = None, precision: str | None = None, backward: bool = True,
                 schedule: Schedule | None = None) -> None:
        if transport not in self.TRANSPORTS:
            raise ValueError(f"the triton backend moves rows through peer memory: transport must be 'peers' or "
                             f"'peers-triton', got {transport!r}")
        if peers is None:
            from ..distributed import default_peers
            peers = default_peers(group, x_local.device)
        if list(peers.local_ranks) != [rank]:
            raise ValueError(f"peer group drives ranks {list(peers.local_ranks)}, expected [{rank}]")
        super().__init__(x_local, topk_ids, topk_weights_local, w_gate, w_up, w_down, peers=peers, world=world,
                         num_experts=num_experts, config=config, precision=resolve_precision(precision, x_local),
                         backward=backward, schedule=schedule)


# ========================================================================================================
# mok.moe(..., backend="triton")
# ========================================================================================================
def triton_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1, precision: str = "bf16",
               config: MoKConfig | None = None) -> torch.Tensor:
    """``mok.moe(..., backend="triton")``: see the module docstring. Inputs as :func:`mok.moe` (checked there);
    for ``precision="mxfp8"`` the usual bf16 weights (quantized through :meth:`mok.mxfp8.MXFP8Weights.quantize`'s
    cache, so only once per weight version)."""
    backward = backward_may_follow(x, topk_weights, w_gate, w_up, w_down)
    config = config or MoKConfig()

    def make_run(x, topk_weights, w_gate, w_up, w_down):
        return TritonLayerRun(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size, config, precision,
                              backward=backward)

    return LayerRunFunction.apply(x.contiguous(), topk_weights, w_gate, w_up, w_down, make_run)


register_backend(Backend("triton", triton_moe, ("bf16", "fp32", "mxfp8"),
                         "Triton reference kernels: pull dispatch, grouped GEMMs with fused SwiGLU, push combine; "
                         "BF16, FP32 and MXFP8"))
