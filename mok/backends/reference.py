"""The reference backend: MoK's algorithm, step by step, in PyTorch.

This is the oracle the Triton kernels and the CUDA megakernel are checked against, so it is written the way
they work, not the way a PyTorch user would write an MoE layer:

1. **Ranks.** ``R = ep_size`` expert-parallel ranks; rank r owns tokens ``[r*T/R, (r+1)*T/R)`` and experts
   ``[r*E/R, (r+1)*E/R)``, and each rank has its own token buffer, ring and combine slots. A process drives
   its *local ranks* (:class:`LayerRun`, one :class:`RankRun` each): all R of them here, emulated in one
   process (:class:`mok.comm.EmulatedPeers`), or one per process across GPUs (:mod:`mok.distributed` runs this
   very code). Rows move between ranks only through a transport (:mod:`mok.comm.transport`): here torch
   indexing into the emulated peers' buffers.
2. **One schedule table per rank** (:mod:`mok.schedule`) drives all four transfers (:mod:`mok.transfers`).
3. **The ring walk.** Each rank walks its table in minibatches through a fixed ring (:mod:`mok.ring`). All
   ranks take step ``i`` together (minibatch ``i`` of every rank that has one), which a collective transport
   needs and which changes nothing when ranks are emulated.

   * Forward step: pull-dispatch the minibatch's token rows into the ring; gate/up GEMM per tile; SwiGLU and
     down GEMM per tile; push-combine each result row into its source's (token, k) slot. After a fence, each
     rank sums its own slots over k (fp32, k ascending) with its router weights.
   * Backward step, minibatches in reverse: replay the minibatch if the ring has overwritten it since the
     forward (dispatch and gate/up again); pull reverse-combine ``dO`` rows (unscaled) and router weights;
     per tile the fused backward (down dgrad, SwiGLU backward with the router-weight gradient, gate/up dgrad,
     both weight gradients); push reverse-dispatch ``dx`` and ``dw`` into the source's slots. After a fence,
     each rank sums its ``dx`` slots over k.
4. **Tile by tile.** Expert math is done per tile (``expert_padding`` rows, one expert per tile) with
   fixed-shape products, like a kernel's thread blocks. A row's result therefore never depends on which other
   rows share its minibatch, so the ring size and the EP degree cannot change a single bit.
5. **Fixed wgrad order.** Weight gradients accumulate tile by tile in fp32 in one fixed order (descending row
   order within each expert's segment, the order in which the backward walks the ring), which again does not
   depend on the ring size or the EP degree because segments are identical across EP degrees.

Numerics: GEMM operands are the activation dtype's values, multiplied and accumulated in fp32 (TF32 is
switched off here); the rounding points are those of :mod:`mok.swiglu`. The backward is an explicit
``torch.autograd.Function``, not autograd through the forward.
"""

from __future__ import annotations

import contextlib

import torch

from ..comm import EmulatedPeers
from ..comm.transport import PeerTransport, Transport, Window
from ..config import MoKConfig
from ..heuristics import rank_minibatch_rows
from ..ring import RingBuffer, RingPlan, plan_ring
from ..schedule import Schedule, build_schedule
from ..swiglu import swiglu_backward, swiglu_forward
from ..transfers import sum_over_k
from .layer_run import LayerRunFunction


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


# --------------------------------------------------------------------------------------------------------
# One rank: its ring and the tile math on its experts
# --------------------------------------------------------------------------------------------------------

class RankRun:
    """One expert-side rank's share of a layer run: its ring and the per-tile arithmetic on its experts.

    It never moves a row between ranks: token rows arrive in its ring (pulled by the :class:`LayerRun`), and
    results leave as return values for the layer run to push.

    Args:
        rank: the rank (global numbering).
        plan: how its schedule rows walk its ring.
        tile_expert: its table's local expert of each tile (-1 past the last segment).
        tile: rows per tile (``expert_padding``).
        w_gate_up: ``[E_local, 2I, H]`` fp32, gate rows then up rows of each of its experts.
        w_down: ``[E_local, H, I]`` fp32.
        dtype: the activation dtype (ring contents, outputs).
    """

    def __init__(self, rank: int, plan: RingPlan, tile_expert: list[int], tile: int, w_gate_up: torch.Tensor,
                 w_down: torch.Tensor, dtype: torch.dtype) -> None:
        self.rank, self.tile, self.tile_expert, self.dtype = rank, tile, tile_expert, dtype
        self.w_gate_up, self.w_down = w_gate_up, w_down
        _, self.hidden, self.intermediate = w_down.shape
        columns = {"x": (self.hidden, dtype), "gate_up": (2 * self.intermediate, dtype)}
        self.ring = RingBuffer(plan, columns, w_down.device)

    def owns(self, i: int) -> bool:
        """Whether this rank has a minibatch ``i`` (ranks with fewer rows finish early)."""
        return i < self.ring.plan.num_minibatches

    def rows(self, name: str, i: int) -> torch.Tensor:
        """Ring rows of minibatch ``i`` in buffer ``name`` (``"x"`` or ``"gate_up"``); no rows if not owned."""
        if self.owns(i):
            return self.ring.rows(name, i)
        ring = self.ring.tensors[name]
        return ring.new_empty(0, ring.shape[1])

    def tiles(self, i: int):
        """``(row range within minibatch i, local expert)`` of each real tile of minibatch ``i``."""
        if not self.owns(i):
            return
        start, end = self.ring.plan.window(i)
        for tile_start in range(start, end, self.tile):
            expert = self.tile_expert[tile_start // self.tile]
            if expert >= 0:
                yield slice(tile_start - start, tile_start - start + self.tile), expert

    # ---- forward ----------------------------------------------------------------------------------------
    def project(self, i: int) -> None:
        """Gate/up GEMM of minibatch ``i``, tile by tile, from the token rows already pulled into the ring."""
        x_rows, gate_up = self.rows("x", i), self.rows("gate_up", i)
        for rows, expert in self.tiles(i):
            tile_x = x_rows[rows].float().contiguous()
            gate_up[rows] = (tile_x @ self.w_gate_up[expert].T).to(self.dtype)
        self.ring.claim(i)

    def expert_forward(self, i: int) -> torch.Tensor:
        """SwiGLU and down GEMM of minibatch ``i``, tile by tile: ``y`` ``[rows of i, H]`` (0 on padding)."""
        inter, gate_up = self.intermediate, self.rows("gate_up", i)
        y = torch.zeros(gate_up.shape[0], self.hidden, dtype=self.dtype, device=gate_up.device)
        for rows, expert in self.tiles(i):
            h = swiglu_forward(gate_up[rows, :inter], gate_up[rows, inter:]).to(self.dtype)
            y[rows] = (h.float() @ self.w_down[expert].T).to(self.dtype)
        return y

    # ---- backward ---------------------------------------------------------------------------------------
    def expert_backward(self, i: int, grad_rows: torch.Tensor, weight_rows: torch.Tensor,
                        d_gate_up: torch.Tensor, d_down: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The fused backward of minibatch ``i``, tiles in reverse order.

        Args:
            grad_rows: ``[rows of i, H]`` the pulled ``dO`` rows (unscaled; 0 on padding).
            weight_rows: ``[rows of i]`` fp32 router weight of each row (0 on padding).
            d_gate_up, d_down: fp32 weight-gradient accumulators of this rank's experts (shapes of
                ``w_gate_up``, ``w_down``); each tile adds its product, in this fixed order.

        Returns ``dx`` ``[rows of i, H]`` (activation dtype) and ``dw`` ``[rows of i]`` fp32, 0 on padding.
        """
        inter = self.intermediate
        x_rows, gate_up = self.rows("x", i), self.rows("gate_up", i)
        dx_rows = torch.zeros(x_rows.shape[0], self.hidden, dtype=self.dtype, device=x_rows.device)
        dw_rows = torch.zeros(x_rows.shape[0], dtype=torch.float32, device=x_rows.device)
        for rows, expert in reversed(list(self.tiles(i))):
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
        return dx_rows, dw_rows


# --------------------------------------------------------------------------------------------------------
# The ranks of one process, walking their rings in step
# --------------------------------------------------------------------------------------------------------

class LayerRun:
    """One forward (and its backward) of the layer for the ranks this process drives (``transport.local_ranks``).

    Holds what the forward leaves for the backward: the schedule, each local rank's ring, the transport.

    Args:
        x: ``[L * T_rank, H]`` the local ranks' tokens, rank after rank (bf16 or fp32).
        topk_weights: ``[L * T_rank, K]`` fp32 router weights of those tokens.
        w_gate, w_up: ``[L * E_rank, I, H]``; w_down: ``[L * E_rank, H, I]``: the local ranks' experts.
        schedule: every rank's table, built from the global routing (every process builds the same).
        transport: moves rows between ranks; its ``local_ranks`` (``L`` consecutive ranks) are the ranks run.
        config: :class:`MoKConfig` (tile, minibatch, ring; the same on every process).
    """

    def __init__(self, x: torch.Tensor, topk_weights: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor,
                 w_down: torch.Tensor, *, schedule: Schedule, transport: Transport, config: MoKConfig) -> None:
        local = list(transport.local_ranks)
        if local != list(range(local[0], local[0] + len(local))):
            raise ValueError(f"local ranks must be consecutive, got {local}")
        self.schedule, self.transport = schedule, transport
        self.dtype, self.device = x.dtype, x.device
        self.weight_dtype = w_gate.dtype
        self.hidden, self.intermediate, self.top_k = x.shape[1], w_gate.shape[1], schedule.top_k
        tokens, experts = schedule.tokens_per_rank, schedule.num_local_experts
        if x.shape[0] != len(local) * tokens or w_gate.shape[0] != len(local) * experts:
            raise ValueError(f"{len(local)} local rank(s) need {len(local) * tokens} tokens and "
                             f"{len(local) * experts} experts; got {x.shape[0]} and {w_gate.shape[0]}")
        self.x = list(x.split(tokens))
        self.topk_weights = list(topk_weights.float().reshape(len(local), -1))  # [T_rank * K] per rank

        # fp32 copies of the weights, gate and up stacked as one [2I, H] matrix per expert so the gate/up GEMM
        # is one product (as in the kernels). Converted once per call, not once per tile.
        self.w_gate_up = torch.cat([w_gate, w_up], dim=1).float()
        self.w_down = w_down.float()

        mb_rows = rank_minibatch_rows(tokens, self.hidden, self.intermediate, experts, self.top_k, self.device, config)
        # Every rank's plan (RingPlan checks that the ring holds whole minibatches), local or not: windows name every rank's rows (a collective transport needs them).
        self.plans = [plan_ring(rows, mb_rows, config.ring_rows) for rows in schedule.rows_used()]
        self.steps = max(plan.num_minibatches for plan in self.plans)
        tile_expert = schedule.tile_expert.tolist()
        self.ranks = [RankRun(r, self.plans[r], tile_expert[r], config.expert_padding,
                              self.w_gate_up[self._experts(j)], self.w_down[self._experts(j)], self.dtype)
                      for j, r in enumerate(local)]

    def _experts(self, j: int) -> slice:
        """The experts of the ``j``-th local rank, as indices into this process's weights."""
        experts = self.schedule.num_local_experts
        return slice(j * experts, (j + 1) * experts)

    def windows(self, i: int, *, replay_only: bool = False) -> list[Window]:
        """Every rank's schedule rows of step ``i``: empty where a rank has no minibatch ``i`` or, with
        ``replay_only``, where minibatch ``i`` is still in that rank's ring after the forward."""
        windows = []
        for plan in self.plans:
            skip = i >= plan.num_minibatches or (replay_only and plan.resident_after_forward(i))
            windows.append((0, 0) if skip else plan.window(i))
        return windows

    def _dispatch_and_project(self, run: RankRun, i: int, windows: list[Window], x_src) -> None:
        """Pull rank ``run``'s rows ``windows[run.rank]`` of minibatch ``i`` into its ring and run the gate/up
        GEMM (the pull is issued even for an empty window: a collective transport needs every rank)."""
        start, end = windows[run.rank]
        self.transport.pull(run.rank, windows, x_src, run.rows("x", i)[:max(end - start, 0)], by_token=True)
        if end > start:
            run.project(i)

    def _publish_inputs(self) -> tuple[object, object]:
        """Every local rank's ``x`` and router weights, readable by every rank; the two handles."""
        for j, run in enumerate(self.ranks):
            x_src = self.transport.publish("x", run.rank, self.x[j])
            w_src = self.transport.publish("topk_weights", run.rank, self.topk_weights[j])
        return x_src, w_src

    # ----------------------------------------------------------------------------------------------------
    # Forward
    # ----------------------------------------------------------------------------------------------------
    def forward(self) -> torch.Tensor:
        """``[L * T_rank, H]`` in x's dtype: the local ranks' tokens' outputs."""
        tr, slots = self.transport, self.schedule.slots_per_rank
        x_src, _ = self._publish_inputs()
        combine = tr.slots("combine_slots", (slots, self.hidden), self.dtype)
        tr.fence()  # every rank's x is published, and nobody still reads last call's slots
        with ieee_fp32_matmul():
            for i in range(self.steps):
                windows = self.windows(i)
                for run in self.ranks:
                    self._dispatch_and_project(run, i, windows, x_src)
                    tr.push(run.rank, windows, run.expert_forward(i), combine)
        tr.fence()  # every push has landed
        out = [sum_over_k(tr.local(combine, run.rank), self.top_k, self.topk_weights[j].view(-1, self.top_k))
               for j, run in enumerate(self.ranks)]
        return torch.cat(out).to(self.dtype)

    # ----------------------------------------------------------------------------------------------------
    # Backward
    # ----------------------------------------------------------------------------------------------------
    def backward(self, grad_out: torch.Tensor):
        """Gradients of the local ranks' inputs from ``grad_out`` ``[L * T_rank, H]``: ``(dx [L*T_rank, H],
        d_topk_weights [L*T_rank, K] fp32, d_w_gate, d_w_up [L*E_rank, I, H], d_w_down [L*E_rank, H, I])``."""
        tr, inter, slots = self.transport, self.intermediate, self.schedule.slots_per_rank
        # Re-publish x and the weights: another layer sharing the peer buffers may have used them since.
        x_src, w_src = self._publish_inputs()
        for run, grad in zip(self.ranks, grad_out.split(self.schedule.tokens_per_rank)):
            g_src = tr.publish("grad_out", run.rank, grad)
        dx_slots = tr.slots("dx_slots", (slots, self.hidden), self.dtype)
        dw_slots = tr.slots("dw_slots", (slots,), torch.float32)
        tr.fence()
        d_gate_up = torch.zeros_like(self.w_gate_up)
        d_down = torch.zeros_like(self.w_down)

        with ieee_fp32_matmul():
            for i in range(self.steps - 1, -1, -1):
                windows, replay = self.windows(i), self.windows(i, replay_only=True)
                for j, run in enumerate(self.ranks):
                    # Replay a minibatch the ring has overwritten since the forward. The decision comes from
                    # the plans (every process derives every rank's); the ring's own record must agree.
                    start, end = replay[run.rank]
                    if run.owns(i) and (end > start) == run.ring.holds(i):
                        raise RuntimeError(f"rank {run.rank}: ring bookkeeping disagrees with the plan for "
                                           f"minibatch {i}")
                    self._dispatch_and_project(run, i, replay, x_src)

                    # Pull reverse-combine: dO rows (unscaled) and the router weight of each row.
                    n = run.rows("x", i).shape[0]
                    grad_rows = torch.empty(n, self.hidden, dtype=self.dtype, device=self.device)
                    weight_rows = torch.empty(n, dtype=torch.float32, device=self.device)
                    tr.pull_grad_and_weight(run.rank, windows, g_src, w_src, grad_rows, weight_rows)

                    experts = self._experts(j)
                    dx_rows, dw_rows = run.expert_backward(i, grad_rows, weight_rows, d_gate_up[experts],
                                                           d_down[experts])
                    # Push reverse-dispatch: dx and dw into the source's (token, k) slots.
                    tr.push(run.rank, windows, dx_rows, dx_slots)
                    tr.push(run.rank, windows, dw_rows, dw_slots)
        tr.fence()
        dx = torch.cat([sum_over_k(tr.local(dx_slots, run.rank), self.top_k) for run in self.ranks])
        # torch.cat copies: the slot buffers are reused by the next call.
        d_weights = torch.cat([tr.local(dw_slots, run.rank).view(-1, self.top_k) for run in self.ranks])
        wd = self.weight_dtype
        return (dx.to(self.dtype), d_weights, d_gate_up[:, :inter].to(wd), d_gate_up[:, inter:].to(wd),
                d_down.to(wd))


class EmulatedLayerRun(LayerRun):
    """:class:`LayerRun` over ``ep_size`` ranks emulated in this process: every rank is local, rows move by
    torch indexing into the emulated peers' buffers (:class:`~mok.comm.transport.PeerTransport`), and the
    fences between phases are no-ops (one stream orders everything).

    Takes the whole problem: ``x`` ``[T, H]``, ``topk_ids`` / ``topk_weights`` ``[T, K]`` (fp32 weights),
    ``w_gate``, ``w_up`` ``[E, I, H]``, ``w_down`` ``[E, H, I]``.
    """

    def __init__(self, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                 w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, ep_size: int,
                 config: MoKConfig) -> None:
        schedule = build_schedule(topk_ids, w_gate.shape[0], ep_size, config.expert_padding, config.capacity_rows)
        transport = PeerTransport(schedule, EmulatedPeers(ep_size, x.device))
        super().__init__(x, topk_weights, w_gate, w_up, w_down, schedule=schedule, transport=transport,
                         config=config)


def reference_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1,
                  precision: str = "bf16", config: MoKConfig | None = None) -> torch.Tensor:
    """``mok.moe(..., backend="reference")``: see the module docstring."""
    del precision  # bf16 and fp32 both compute in the activation dtype; checked by mok.moe
    config = config or MoKConfig()

    def make_run(x, topk_weights, w_gate, w_up, w_down):
        return EmulatedLayerRun(x, topk_ids, topk_weights.float(), w_gate, w_up, w_down, ep_size, config)

    return LayerRunFunction.apply(x, topk_weights, w_gate, w_up, w_down, make_run)
