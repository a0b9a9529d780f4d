"""The reference backend: MoK's algorithm, step by step, in PyTorch.

This is the oracle the Triton kernels and the CUDA megakernel are checked against, so it is written the way
they work, not the way a PyTorch user would write an MoE layer:

1. ``ep_size`` ranks are emulated in one process (:class:`mok.comm.EmulatedPeers`); rank r owns tokens
   ``[r*T/R, (r+1)*T/R)`` and experts ``[r*E/R, (r+1)*E/R)``, and each rank has its own token buffer, ring
   and combine slots.
2. One schedule table per rank (:mod:`mok.schedule`) drives all four transfers (:mod:`mok.transfers`).
3. Each rank walks its table in minibatches through a fixed ring (:mod:`mok.ring`).
4. Expert math is done **tile by tile** (``expert_padding`` rows, one expert per tile) with fixed-shape
   products, like a kernel's thread blocks. A row's result therefore never depends on which other rows share
   its minibatch, so the ring size and the EP degree cannot change a single bit.
5. Weight gradients accumulate tile by tile in fp32 in one fixed order (descending row order within each
   expert's segment, the order in which the backward walks the ring), which again does not depend on the ring
   size or the EP degree because segments are identical across EP degrees.

Numerics: GEMM operands are the activation dtype's values, multiplied and accumulated in fp32 (TF32 is
switched off here); the rounding points are those of :mod:`mok.swiglu`. The backward is an explicit
``torch.autograd.Function``: pull reverse-combine, fused SwiGLU backward with the router-weight gradient, push
reverse-dispatch, fixed-order sums.
"""

from __future__ import annotations

import contextlib

import torch

from ..comm import EmulatedPeers
from ..config import MoEShape, MoKConfig
from ..heuristics import device_spec, minibatch_rows
from ..ring import RingBuffer, plan_ring
from ..schedule import build_schedule
from ..swiglu import swiglu_backward, swiglu_forward
from ..transfers import pull_rows, push_rows, sum_over_k


@contextlib.contextmanager
def ieee_fp32_matmul():
    """Plain fp32 products on CUDA (no TF32) for the duration of the block."""
    matmul = torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    matmul.allow_tf32 = False
    try:
        yield
    finally:
        matmul.allow_tf32 = saved


def choose_minibatch_rows(x: torch.Tensor, num_experts: int, top_k: int, intermediate: int, ep_size: int,
                          config: MoKConfig) -> int:
    """Minibatch rows for one rank's share of the problem (``config.minibatch_rows`` or its policy)."""
    tokens, hidden = x.shape
    shape = MoEShape("rank", tokens // ep_size, hidden, intermediate, num_experts // ep_size, top_k)
    return minibatch_rows(shape, device_spec(x.device), config)


class EmulatedLayerRun:
    """One forward (and its backward) of the layer over ``ep_size`` emulated ranks.

    Holds what the forward leaves for the backward: the schedule, the peers' buffers and each rank's ring.
    """

    def __init__(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                 w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, ep_size: int,
                 config: MoKConfig) -> None:
        self.dtype = x.dtype
        self.device = x.device
        self.ep_size = ep_size
        self.tokens, self.hidden = x.shape
        self.num_experts, self.intermediate, _ = w_gate.shape
        self.top_k = topk_ids.shape[1]
        self.tokens_per_rank = self.tokens // ep_size
        self.local_experts = self.num_experts // ep_size
        self.tile = config.expert_padding
        self.weight_dtype = w_gate.dtype

        # fp32 copies of the weights, gate and up stacked as one [2I, H] matrix per expert so the gate/up GEMM
        # is one product (as in the kernels). Converted once per call, not once per tile.
        self.w_gate_up = torch.cat([w_gate, w_up], dim=1).float()
        self.w_down = w_down.float()

        self.schedule = build_schedule(topk_ids, self.num_experts, ep_size, self.tile, config.capacity_rows)
        self.tile_expert = self.schedule.tile_expert.tolist()
        rows_used = self.schedule.rows_used()

        mb_rows = choose_minibatch_rows(x, self.num_experts, self.top_k, self.intermediate, ep_size, config)
        if config.ring_rows is not None and config.ring_rows % mb_rows:
            raise ValueError(f"MoKConfig.ring_rows ({config.ring_rows}) must be a multiple of the minibatch "
                             f"size ({mb_rows} rows)")
        ring_columns = {"x": (self.hidden, self.dtype), "gate_up": (2 * self.intermediate, self.dtype)}
        self.rings = [RingBuffer(plan_ring(rows, mb_rows, config.ring_rows), ring_columns, self.device)
                      for rows in rows_used]

        # Symmetric buffers: what each rank exposes to its peers.
        self.peers = EmulatedPeers(ep_size, self.device)
        slots = self.tokens_per_rank * self.top_k
        self.x_buf = self.peers.buffer("x", (self.tokens_per_rank, self.hidden), self.dtype)
        self.weight_buf = self.peers.buffer("topk_weights", (slots,), torch.float32)
        self.combine_buf = self.peers.buffer("combine_slots", (slots, self.hidden), self.dtype)
        for r in range(ep_size):
            own = slice(r * self.tokens_per_rank, (r + 1) * self.tokens_per_rank)
            self.x_buf[r].copy_(x[own])
            self.weight_buf[r].copy_(topk_weights[own].reshape(-1))

    # ----------------------------------------------------------------------------------------------------
    # Tile helpers
    # ----------------------------------------------------------------------------------------------------
    def _tiles(self, rank: int, minibatch: int):
        """(tile row range within the minibatch, global expert id) for each real tile of a minibatch."""
        start, end = self.rings[rank].plan.window(minibatch)
        for tile_start in range(start, end, self.tile):
            local = self.tile_expert[rank][tile_start // self.tile]
            if local < 0:
                continue
            yield slice(tile_start - start, tile_start - start + self.tile), rank * self.local_experts + local

    def _dispatch_and_project(self, rank: int, minibatch: int) -> None:
        """Pull the minibatch's token rows into the ring and run the gate/up GEMM, tile by tile."""
        ring = self.rings[rank]
        start, end = ring.plan.window(minibatch)
        x_rows = ring.rows("x", minibatch)
        gate_up = ring.rows("gate_up", minibatch)
        pull_rows(self.schedule.rank(rank), start, end, self.x_buf, x_rows, by_token=True)
        for rows, expert in self._tiles(rank, minibatch):
            tile_x = x_rows[rows].float().contiguous()
            gate_up[rows] = (tile_x @ self.w_gate_up[expert].T).to(self.dtype)
        ring.claim(minibatch)

    # ----------------------------------------------------------------------------------------------------
    # Forward
    # ----------------------------------------------------------------------------------------------------
    def forward(self) -> torch.Tensor:
        inter = self.intermediate
        with ieee_fp32_matmul():
            for rank in range(self.ep_size):
                ring = self.rings[rank]
                table = self.schedule.rank(rank)
                for i in ring.plan.forward_order():
                    self._dispatch_and_project(rank, i)
                    start, end = ring.plan.window(i)
                    gate_up = ring.rows("gate_up", i)
                    y = torch.zeros(end - start, self.hidden, dtype=self.dtype, device=self.device)
                    for rows, expert in self._tiles(rank, i):
                        h = swiglu_forward(gate_up[rows, :inter], gate_up[rows, inter:]).to(self.dtype)
                        y[rows] = (h.float() @ self.w_down[expert].T).to(self.dtype)
                    push_rows(table, start, end, y, self.combine_buf)
            self.peers.barrier()
            out = [sum_over_k(self.combine_buf[r], self.top_k, self.weight_buf[r].view(-1, self.top_k))
                   for r in range(self.ep_size)]
        return torch.cat(out).to(self.dtype)

    # ----------------------------------------------------------------------------------------------------
    # Backward
    # ----------------------------------------------------------------------------------------------------
    def backward(self, grad_out: torch.Tensor):
        inter, slots = self.intermediate, self.tokens_per_rank * self.top_k
        grad_buf = self.peers.buffer("grad_out", (self.tokens_per_rank, self.hidden), self.dtype)
        dx_buf = self.peers.buffer("dx_slots", (slots, self.hidden), self.dtype)
        dw_buf = self.peers.buffer("dw_slots", (slots,), torch.float32)
        for r in range(self.ep_size):
            grad_buf[r].copy_(grad_out[r * self.tokens_per_rank:(r + 1) * self.tokens_per_rank])
        d_gate_up = torch.zeros_like(self.w_gate_up)
        d_down = torch.zeros_like(self.w_down)

        with ieee_fp32_matmul():
            for rank in range(self.ep_size):
                ring = self.rings[rank]
                table = self.schedule.rank(rank)
                for i in ring.plan.backward_order():
                    if not ring.holds(i):
                        self._dispatch_and_project(rank, i)  # overwritten since the forward: replay it
                    start, end = ring.plan.window(i)
                    n = end - start
                    # Pull reverse-combine: dO rows (unscaled) and the router weight of each row.
                    grad_rows = torch.empty(n, self.hidden, dtype=self.dtype, device=self.device)
                    weight_rows = torch.empty(n, dtype=torch.float32, device=self.device)
                    pull_rows(table, start, end, grad_buf, grad_rows, by_token=True)
                    pull_rows(table, start, end, self.weight_buf, weight_rows, by_token=False)

                    x_rows, gate_up = ring.rows("x", i), ring.rows("gate_up", i)
                    dx_rows = torch.zeros(n, self.hidden, dtype=self.dtype, device=self.device)
                    dw_rows = torch.zeros(n, dtype=torch.float32, device=self.device)
                    for rows, expert in reversed(list(self._tiles(rank, i))):
                        tile_grad = grad_rows[rows].float().contiguous()
                        g = tile_grad @ self.w_down[expert]
                        d_gate, d_up, dw, _, h_weighted = swiglu_backward(
                            gate_up[rows, :inter], gate_up[rows, inter:], g, weight_rows[rows])
                        d_gu = torch.cat([d_gate, d_up], dim=1).to(self.dtype).float()
                        dx_rows[rows] = (d_gu @ self.w_gate_up[expert]).to(self.dtype)
                        dw_rows[rows] = dw
                        # Weight gradients: one fixed-shape product per tile, added in a fixed order.
                        d_gate_up[expert] += d_gu.T @ x_rows[rows].float()
                        d_down[expert] += tile_grad.T @ h_weighted.to(self.dtype).float()
                    # Push reverse-dispatch: dx and dw into the source's (token, k) slots.
                    push_rows(table, start, end, dx_rows, dx_buf)
                    push_rows(table, start, end, dw_rows, dw_buf)
            self.peers.barrier()
            dx = torch.cat([sum_over_k(dx_buf[r], self.top_k) for r in range(self.ep_size)]).to(self.dtype)
        d_weights = torch.cat([dw_buf[r].view(-1, self.top_k) for r in range(self.ep_size)])
        wd = self.weight_dtype
        return dx, d_weights, d_gate_up[:, :inter].to(wd), d_gate_up[:, inter:].to(wd), d_down.to(wd)


class ReferenceMoE(torch.autograd.Function):
    """Autograd wrapper: forward and an explicit MoK backward (not autograd through the forward)."""

    @staticmethod
    def forward(ctx, x, topk_weights, w_gate, w_up, w_down, topk_ids, ep_size, config):
        run = EmulatedLayerRun(x, topk_ids, topk_weights.float(), w_gate, w_up, w_down, ep_size, config)
        ctx.run = run
        ctx.weights_dtype = topk_weights.dtype
        return run.forward()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        dx, d_weights, d_gate, d_up, d_down = ctx.run.backward(grad_out.contiguous())
        ctx.run = None
        return dx, d_weights.to(ctx.weights_dtype), d_gate, d_up, d_down, None, None, None


def reference_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1,
                  precision: str = "bf16", config: MoKConfig | None = None) -> torch.Tensor:
    """``mok.moe(..., backend="reference")``: see the module docstring."""
    del precision  # bf16 and fp32 both compute in the activation dtype; checked by mok.moe
    return ReferenceMoE.apply(x, topk_weights, w_gate, w_up, w_down, topk_ids, ep_size, config or MoKConfig())
