"""``mok.moe(..., backend="triton")``: the Triton kernels composed into MoK's forward and backward.

The stages, per expert-side rank and ring minibatch (rank r owns tokens ``[rT/R, (r+1)T/R)`` and experts
``[rE/R, (r+1)E/R)``; the ``ep_size`` ranks are emulated in one process and one stream, as
:class:`mok.comm.EmulatedPeers` does, every rank's buffer being a :class:`mok.comm.PeerBuffer` that kernels
reach through its ``ptr_table``)::

    forward   pull dispatch x -> ring        (pull_dispatch.pull_token_rows)
              gate/up GEMM + SwiGLU          (swiglu.gate_up_swiglu: gate_up -> ring, h -> scratch)
              down GEMM + push combine       (grouped_gemm.grouped_gemm_forward(push=...): y -> source slots)
      then, on every source rank: out[t] = sum_k w[t,k] y[t,k]   (push_combine.weighted_sum_over_k)

    backward  minibatches in reverse; replay (dispatch + gate/up) those the ring has overwritten
              pull reverse-combine dO, w     (pull_dispatch.pull_reverse_combine)
              down dgrad + SwiGLU backward   (swiglu.down_dgrad_swiglu_backward: d_gate_up, w*h, dw partials)
              dx GEMM + push reverse-dispatch (grouped_gemm.grouped_gemm_dgrad(push=...): dx -> source slots)
              dw push reverse-dispatch       (push_combine.push_router_grad)
              weight gradients               (grouped_gemm.grouped_wgrad: one fixed-order chain per expert)
      then, on every source rank: dx[t] = sum_k dx[t,k]           (push_combine.sum_over_k)

Minibatching. These kernels run stage by stage (no kernel overlaps communication with compute), so with
``MoKConfig.minibatch_rows`` and ``ring_rows`` both ``None`` each rank walks **one minibatch covering its whole
schedule table** (``capacity`` rows; kernels skip the tiles past the rows in use on the device), which needs
no host synchronisation at all. An explicit ``minibatch_rows`` or ``ring_rows`` is honoured exactly as the
reference backend does (:mod:`mok.ring`: forward in order, backward in reverse, overwritten minibatches
replayed); that needs each rank's rows in use on the host to count minibatches: one synchronisation per
forward. No result bit depends on the minibatching or on ``ep_size``.

Emulated peer buffers. A rank's token buffer, router weights and slot buffers are the rank's share (dim-0
slice) of one tensor (:func:`peer_slices`): x, dO and the router weights are the caller's tensors, not copies.
Pointer tables travel host -> device from pinned memory without blocking, so building them never waits for
the GPU. One stream orders every rank's writes before the sums that read them (the emulated barrier).

Precision hook. How dispatched token rows are stored and how the gate/up GEMM reads them is a
:class:`RowFormat`, chosen per precision (:func:`register_row_format`). ``"bf16"`` and ``"fp32"`` use
:class:`PlainRows` (rows in the activation dtype); an MXFP8 format (FP8 rows plus E8M0 scales, a dequantizing
operand loader) plugs in at the same place.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from ..backends import Backend, register_backend
from ..backends.reference import choose_minibatch_rows
from ..comm import PeerBuffer
from ..config import MoKConfig
from ..ring import RingBuffer, RingPlan, plan_ring
from ..schedule import RankSchedule, build_schedule
from ._common import check_device, fresh, poison_
from .grouped_gemm import grouped_gemm_dgrad, grouped_gemm_forward, grouped_wgrad
from .pull_dispatch import pull_reverse_combine, pull_token_rows
from .push_combine import SlotPush, push_router_grad, sum_over_k, weighted_sum_over_k
from .swiglu import down_dgrad_swiglu_backward, gate_up_swiglu, router_grad_partials


def pointer_table(views: list[torch.Tensor], device: torch.device) -> torch.Tensor:
    """int64 ``[R]`` base addresses of ``views`` on ``device``, copied without a host synchronisation."""
    ptrs = torch.tensor([v.data_ptr() for v in views], dtype=torch.int64)
    if device.type == "cuda":
        # NOTE: a blocking host -> device copy would synchronise the stream; from pinned memory it need not
        # (the caching host allocator keeps the pinned block alive until the copy has run).
        return ptrs.pin_memory().to(device, non_blocking=True)
    return ptrs


def peer_slices(name: str, tensor: torch.Tensor, ep_size: int) -> PeerBuffer:
    """A :class:`PeerBuffer` whose rank r is the r-th of ``ep_size`` equal dim-0 slices of ``tensor``.

    In emulation a rank's buffer (x, dO, router weights, slots) is simply its share of one tensor, so the
    caller's tensors are used in place; on real GPUs these would be symmetric allocations.
    """
    tensor = tensor.contiguous()
    views = list(tensor.chunk(ep_size)) if tensor.shape[0] else [tensor] * ep_size
    return PeerBuffer(name, tuple(views[0].shape), tensor.dtype, views, pointer_table(views, tensor.device))


# ========================================================================================================
# Precision hook: the dispatched row format and the gate/up GEMM's operand loader
# ========================================================================================================
class RowFormat:
    """How token rows are published by source ranks, pulled into the ring, and read by the gate/up GEMM."""

    def ring_columns(self, hidden: int, intermediate: int, dtype: torch.dtype) -> dict[str, tuple[int, torch.dtype]]:
        """Per-row ring buffers (name -> (width, dtype)); must include ``"gate_up"`` ``(2I, dtype)``."""
        raise NotImplementedError

    def publish(self, x: torch.Tensor, ep_size: int) -> dict[str, PeerBuffer]:
        """What every source rank exposes for the dispatch (``x``: ``[T, H]`` in rank order)."""
        raise NotImplementedError

    def pull(self, table: RankSchedule, start: int, n_rows: int, published: dict[str, PeerBuffer],
             ring_rows: dict[str, torch.Tensor]) -> None:
        """Pull table rows ``[start, start + n_rows)`` into the ring minibatch's rows."""
        raise NotImplementedError

    def gate_up(self, ring_rows: dict[str, torch.Tensor], w_gate: torch.Tensor, w_up: torch.Tensor,
                tile_expert: torch.Tensor, tile_rows: int, n_rows: int, h_out: torch.Tensor | None) -> None:
        """The gate/up GEMM + SwiGLU epilogue into ``ring_rows["gate_up"]`` (and ``h_out``)."""
        raise NotImplementedError

    def wgrad_rows(self, ring_rows: dict[str, torch.Tensor]) -> torch.Tensor:
        """The A operand of the W_gate/W_up gradient (the dispatched rows in the activation dtype)."""
        raise NotImplementedError


class PlainRows(RowFormat):
    """bf16 / fp32: rows travel and are multiplied in the activation dtype (fp32 accumulation)."""

    def ring_columns(self, hidden, intermediate, dtype):
        return {"x": (hidden, dtype), "gate_up": (2 * intermediate, dtype)}

    def publish(self, x, ep_size):
        return {"x": peer_slices("x", x, ep_size)}

    def pull(self, table, start, n_rows, published, ring_rows):
        pull_token_rows(table, start, n_rows, published["x"], ring_rows["x"])

    def gate_up(self, ring_rows, w_gate, w_up, tile_expert, tile_rows, n_rows, h_out):
        gate_up_swiglu(ring_rows["x"], w_gate, w_up, tile_expert, tile_rows, gate_up_out=ring_rows["gate_up"],
                       h_out=h_out, n_rows=n_rows)

    def wgrad_rows(self, ring_rows):
        return ring_rows["x"]


_ROW_FORMATS: dict[str, Callable[[], RowFormat]] = {"bf16": PlainRows, "fp32": PlainRows}


def register_row_format(precision: str, factory: Callable[[], RowFormat]) -> None:
    """Make ``precision`` use rows of ``factory()`` (add it to the backend's precisions separately)."""
    _ROW_FORMATS[precision] = factory


def row_format(precision: str) -> RowFormat:
    if precision not in _ROW_FORMATS:
        raise ValueError(f"the triton backend has no row format for precision={precision!r}; "
                         f"registered: {sorted(_ROW_FORMATS)}")
    return _ROW_FORMATS[precision]()


# ========================================================================================================
# One forward and its backward
# ========================================================================================================
class TritonLayerRun:
    """One forward (and its backward) over ``ep_size`` emulated ranks; holds what the backward needs."""

    def __init__(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate: torch.Tensor,
                 w_up: torch.Tensor, w_down: torch.Tensor, ep_size: int, config: MoKConfig, precision: str) -> None:
        check_device(x)
        self.format = row_format(precision)
        self.dtype, self.device = x.dtype, x.device
        self.ep_size = ep_size
        self.tokens, self.hidden = x.shape
        self.num_experts, self.intermediate, _ = w_gate.shape
        self.top_k = topk_ids.shape[1]
        self.tokens_per_rank = self.tokens // ep_size
        self.local_experts = self.num_experts // ep_size
        self.tile = config.expert_padding
        self.weight_dtype = w_gate.dtype

        # Each rank's local experts: views, no copies.
        def local(w):
            w = w.contiguous()
            return [w[r * self.local_experts:(r + 1) * self.local_experts] for r in range(ep_size)]
        self.w_gate, self.w_up, self.w_down = local(w_gate), local(w_up), local(w_down)

        self.schedule = build_schedule(topk_ids, self.num_experts, ep_size, self.tile, config.capacity_rows)
        self.tables = self.schedule.ranks()
        self.plans = self._plan_rings(x, config)
        columns = self.format.ring_columns(self.hidden, self.intermediate, self.dtype)
        self.rings = [RingBuffer(plan, columns, self.device) for plan in self.plans]
        for ring in self.rings:
            for t in ring.tensors.values():
                poison_(t)
        self.scratch_rows = max(plan.minibatch_rows for plan in self.plans)

        # What each source rank exposes for the whole step: its tokens and its router weights.
        self.published = self.format.publish(x, ep_size)
        self.weights_2d = topk_weights.to(torch.float32).contiguous()
        self.weight_buf = peer_slices("topk_weights", self.weights_2d.view(-1), ep_size)

    def _plan_rings(self, x: torch.Tensor, config: MoKConfig) -> list[RingPlan]:
        capacity = self.schedule.capacity
        if config.minibatch_rows is None and config.ring_rows is None:
            # One minibatch over the whole table: no host synchronisation (module docstring).
            return [RingPlan(capacity, capacity, capacity) for _ in range(self.ep_size)]
        mb_rows = choose_minibatch_rows(x, self.num_experts, self.top_k, self.intermediate, self.ep_size, config)
        if config.ring_rows is not None and config.ring_rows % mb_rows:
            raise ValueError(f"MoKConfig.ring_rows ({config.ring_rows}) must be a multiple of the minibatch "
                             f"size ({mb_rows} rows)")
        # NOTE: host synchronisation: the host walks the ring, so it needs each rank's minibatch count.
        return [plan_ring(rows, mb_rows, config.ring_rows) for rows in self.schedule.rows_used()]

    # ----------------------------------------------------------------------------------------------------
    # Shared steps
    # ----------------------------------------------------------------------------------------------------
    def _window(self, rank: int, i: int):
        start, end = self.plans[rank].window(i)
        return start, end - start, self.schedule.tile_expert[rank][start // self.tile:]

    def _ring_rows(self, rank: int, i: int) -> dict[str, torch.Tensor]:
        ring = self.rings[rank]
        return {name: ring.rows(name, i) for name in ring.tensors}

    def _dispatch_and_project(self, rank: int, i: int, h_out: torch.Tensor | None) -> None:
        """Pull minibatch i's token rows into the ring and run the gate/up GEMM (+ SwiGLU) on them."""
        start, n_rows, tile_expert = self._window(rank, i)
        ring_rows = self._ring_rows(rank, i)
        self.format.pull(self.tables[rank], start, n_rows, self.published, ring_rows)
        self.format.gate_up(ring_rows, self.w_gate[rank], self.w_up[rank], tile_expert, self.tile, n_rows, h_out)
        self.rings[rank].claim(i)

    # ----------------------------------------------------------------------------------------------------
    # Forward
    # ----------------------------------------------------------------------------------------------------
    def _slot_buffer(self, name: str, dtype: torch.dtype) -> PeerBuffer:
        """Per-(token, k) slots on every rank, ``[T_local * top_k, H]`` (lives for one pass only)."""
        slots = fresh((self.tokens * self.top_k, self.hidden), dtype, self.device)
        return peer_slices(name, slots, self.ep_size)

    def forward(self) -> torch.Tensor:
        combine = self._slot_buffer("combine_slots", self.dtype)
        out = fresh((self.tokens, self.hidden), self.dtype, self.device)
        h = fresh((self.scratch_rows, self.intermediate), self.dtype, self.device)
        for rank in range(self.ep_size):
            for i in self.plans[rank].forward_order():
                self._dispatch_and_project(rank, i, h_out=h)
                start, n_rows, tile_expert = self._window(rank, i)
                grouped_gemm_forward(h, self.w_down[rank], tile_expert, self.tile, n_rows=n_rows,
                                     push=SlotPush.window(self.tables[rank], start, combine))
        # (barrier: stream order puts every rank's pushes before the sums)
        for rank in range(self.ep_size):
            own = slice(rank * self.tokens_per_rank, (rank + 1) * self.tokens_per_rank)
            weighted_sum_over_k(combine[rank], self.weights_2d[own], out[own])
        return out

    # ----------------------------------------------------------------------------------------------------
    # Backward
    # ----------------------------------------------------------------------------------------------------
    def backward(self, grad_out: torch.Tensor):
        """Returns ``(dx [T, H], d_topk_weights fp32 [T, K], d_w_gate, d_w_up [E, I, H], d_w_down [E, H, I])``."""
        dtype, device, inter, hidden = self.dtype, self.device, self.intermediate, self.hidden
        rows = self.scratch_rows
        grad_buf = peer_slices("grad_out", grad_out.to(dtype), self.ep_size)
        dx = fresh((self.tokens, hidden), dtype, device)
        dw = fresh((self.tokens * self.top_k,), torch.float32, device)
        dw_buf = peer_slices("dw_slots", dw, self.ep_size)
        dx_buf = self._slot_buffer("dx_slots", dtype)
        d_w_gate = fresh((self.num_experts, inter, hidden), self.weight_dtype, device)
        d_w_up = fresh((self.num_experts, inter, hidden), self.weight_dtype, device)
        d_w_down = fresh((self.num_experts, hidden, inter), self.weight_dtype, device)

        # Per-minibatch scratch, reused by every minibatch of every rank (stream order serialises them).
        grad_rows = fresh((rows, hidden), dtype, device)
        weight_rows = fresh((rows,), torch.float32, device)
        d_gate_up = fresh((rows, 2 * inter), dtype, device)
        hw = fresh((rows, inter), dtype, device)
        dw_partial = fresh((rows, router_grad_partials(inter, hidden, dtype, self.tile)), torch.float32, device)
        # fp32 running sums of the weight gradients, only when an expert's chain spans several minibatches.
        chained = any(plan.num_minibatches > 1 for plan in self.plans)
        el = self.local_experts
        chains = ({"gate": fresh((el, inter, hidden), torch.float32, device),
                   "up": fresh((el, inter, hidden), torch.float32, device),
                   "down": fresh((el, hidden, inter), torch.float32, device)} if chained else {})

        for rank in range(self.ep_size):
            table, ring = self.tables[rank], self.rings[rank]
            experts = slice(rank * el, (rank + 1) * el)
            order = list(self.plans[rank].backward_order())
            if not order:  # no rows reach this rank: its experts get no gradient
                for grad in (d_w_gate, d_w_up, d_w_down):
                    grad[experts].zero_()
                continue
            for step, i in enumerate(order):
                if not ring.holds(i):
                    self._dispatch_and_project(rank, i, h_out=None)  # overwritten since the forward: replay
                start, n_rows, tile_expert = self._window(rank, i)
                ring_rows = self._ring_rows(rank, i)

                # ---- pull reverse-combine, then the fused down dgrad + SwiGLU backward ----------------
                pull_reverse_combine(table, start, n_rows, grad_buf, self.weight_buf, grad_rows, weight_rows)
                down_dgrad_swiglu_backward(grad_rows, self.w_down[rank], weight_rows, ring_rows["gate_up"],
                                           tile_expert, self.tile, d_gate_up_out=d_gate_up, hw_out=hw,
                                           dw_partial_out=dw_partial, n_rows=n_rows)

                # ---- dx GEMM with the push reverse-dispatch epilogue; dw push --------------------------
                grouped_gemm_dgrad(d_gate_up, (self.w_gate[rank], self.w_up[rank]), tile_expert, self.tile,
                                   n_rows=n_rows, push=SlotPush.window(table, start, dx_buf))
                push_router_grad(table, start, n_rows, dw_partial, dw_buf)

                # ---- weight gradients: continue each expert's fixed-order chain -----------------------
                chain_args = dict(load_chain=step > 0, store_final=step == len(order) - 1)
                x_rows = self.format.wgrad_rows(ring_rows)
                seg = self.schedule.segment_offsets[rank]
                grouped_wgrad(d_gate_up[:, :inter], x_rows, seg, start, n_rows, self.tile,
                              out=d_w_gate[experts], chain=chains.get("gate"), **chain_args)
                grouped_wgrad(d_gate_up[:, inter:], x_rows, seg, start, n_rows, self.tile,
                              out=d_w_up[experts], chain=chains.get("up"), **chain_args)
                grouped_wgrad(grad_rows, hw, seg, start, n_rows, self.tile,
                              out=d_w_down[experts], chain=chains.get("down"), **chain_args)
        # (barrier: stream order puts every rank's pushes before the sums)
        for rank in range(self.ep_size):
            own = slice(rank * self.tokens_per_rank, (rank + 1) * self.tokens_per_rank)
            sum_over_k(dx_buf[rank], self.top_k, dx[own])
        return dx, dw.view(self.tokens, self.top_k), d_w_gate, d_w_up, d_w_down


def _on_device(device: torch.device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class TritonMoE(torch.autograd.Function):
    """Autograd wrapper: the Triton forward and the explicit MoK backward."""

    @staticmethod
    def forward(ctx, x, topk_weights, w_gate, w_up, w_down, topk_ids, ep_size, config, precision):
        with _on_device(x.device):
            run = TritonLayerRun(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size, config, precision)
            out = run.forward()
        ctx.run = run
        ctx.weights_dtype = topk_weights.dtype
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        run = ctx.run
        with _on_device(grad_out.device):
            dx, d_weights, d_gate, d_up, d_down = run.backward(grad_out.contiguous())
        ctx.run = None
        return dx, d_weights.to(ctx.weights_dtype), d_gate, d_up, d_down, None, None, None, None


def triton_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1, precision: str = "bf16",
               config: MoKConfig | None = None) -> torch.Tensor:
    """``mok.moe(..., backend="triton")``: see the module docstring. Inputs as :func:`mok.moe` (checked there)."""
    return TritonMoE.apply(x.contiguous(), topk_weights, w_gate, w_up, w_down, topk_ids, ep_size,
                           config or MoKConfig(), precision)


register_backend(Backend("triton", triton_moe, ("bf16", "fp32"),
                         "Triton reference kernels: pull dispatch, grouped GEMMs with fused SwiGLU, push combine"))
