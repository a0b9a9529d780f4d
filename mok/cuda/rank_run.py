"""The megakernel across GPUs: one real rank per process, ``distributed_moe(..., backend="cuda")``.

With emulated ranks one launch runs every rank's tasks, and a counter in the launch tells the combine of source
rank s that all of its (token, k) slots were pushed. Across GPUs no launch sees the others' counters, so a
real rank's forward is two launches of the same kernel around a device-side barrier (``local_rank`` and
``phases`` in include/mok/launch.cuh), each on the rank's own stream, with no host synchronisation:

1. **publish**: this rank's tokens and router weights go into symmetric buffers (PyTorch symmetric memory), the
   same addresses on every GPU's pointer tables;
2. **barrier**: every rank's rows are published, and every rank finished reading the slots of its last call;
3. **expert launch** (``phases=1``): this rank's dispatch, gate/up + SwiGLU and down tasks, exactly the tasks an
   emulated launch runs for this rank. Dispatch pulls each row from its source GPU's token buffer through the
   pointer table (MoK's pull dispatch, over NVLink); the down epilogue pushes each result into its source GPU's
   (token, k) slot (MoK's push combine). A top-1 layer writes the weighted rows straight into the sources'
   output buffers instead (the fused top-1 combine);
4. **barrier**: every GPU's pushes have landed;
5. **combine launch** (``phases=2``): the fixed-order weighted sum of this rank's own tokens from its slots (top-1:
   a copy out of the symmetric output buffer).

Every tile product, rounding point and summation order is the emulated launch's, so the output is bitwise
``mok.moe(..., backend="cuda", ep_size=world)`` on the gathered problem (and, the megakernel being
EP-invariant, ``ep_size=1``). The ring, the saved gate/up rows and the weights are this rank's alone; the
schedule tables cover all ranks (every rank builds the same ones from the gathered routing).

The backward is the Triton pipeline's across processes (:class:`mok.triton_ref.pipeline.TritonRankRun`) on the
gate/up rows the expert launch saved, as ``backend="cuda"`` does in one process.
"""

from __future__ import annotations

import dataclasses

import torch

from ..checks import resolve_precision
from ..comm.peers import PeerGroup
from ..config import MoKConfig
from .backend import (Sm90Launch, check_problem, default_fuse_top1, finish_error_check, launch,
                      saved_gate_up_buffer, start_error_checks, workspace_for)
from .schedule_tables import KernelSchedule, build_kernel_schedule
from .workspace import BLOCK_M

PHASE_EXPERTS = 1  # RankPhases in include/mok/workspace.cuh
PHASE_COMBINE = 2


def rank_launches(schedule: KernelSchedule, rank: int, *, x: torch.Tensor, weights: torch.Tensor,
                  out: torch.Tensor, x_ptrs: torch.Tensor, weight_ptrs: torch.Tensor, combine_ptrs: torch.Tensor,
                  out_ptrs: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor,
                  config: MoKConfig, fuse_top1: bool, reuse_workspace: bool = True) -> tuple[Sm90Launch, Sm90Launch]:
    """The expert launch and the combine launch of real rank ``rank`` (:func:`mok.cuda.backend.launch` each).

    Args:
        schedule: the tables of all R ranks (the same on every rank).
        x, weights, out: this rank's token rows ``[T_local, H]`` bf16, router weights ``[T_local * K]`` fp32 and
            output ``[T_local, H]`` (kept alive by the launches; the kernel reaches them through the tables).
        x_ptrs, weight_ptrs, combine_ptrs, out_ptrs: int64 ``[R]`` peer pointer tables: every rank's token rows,
            router weights, combine slots ``[T_local * K, H]`` (fused top-1: its output) and output. Only entry
            ``rank`` of ``out_ptrs`` is written unless ``fuse_top1``.
        w_gate, w_up ``[E_local, I, H]``, w_down ``[E_local, H, I]``: this rank's experts.
        fuse_top1: top-1 layer whose down epilogue writes the sources' outputs (no combine launch work).
    """
    tokens, hidden = x.shape
    top_k = schedule.top_k
    local_experts, intermediate, _ = w_gate.shape
    workspace = workspace_for(config, x.device, num_ranks=schedule.src_rank.shape[0], tokens_per_rank=tokens,
                              top_k=top_k, hidden=hidden, intermediate=intermediate, local_experts=local_experts,
                              capacity=schedule.capacity, fuse_top1=fuse_top1, reuse=reuse_workspace, one_rank=True)
    experts = Sm90Launch(
        schedule=schedule, tokens_per_rank=tokens, top_k=top_k, minibatch_rows=workspace.key.minibatch_rows,
        fuse_top1=bool(fuse_top1), x=x, weights=weights, out=out, x_ptrs=x_ptrs, weight_ptrs=weight_ptrs,
        combine_ptrs=combine_ptrs, out_ptrs=out_ptrs, w_gate=w_gate.detach().contiguous(),
        w_up=w_up.detach().contiguous(), w_down=w_down.detach().contiguous(), workspace=workspace,
        x_row_bytes=hidden * x.element_size(), local_rank=rank, phases=PHASE_EXPERTS)
    return experts, dataclasses.replace(experts, phases=PHASE_COMBINE)


class CudaRankRun:
    """One real rank of ``distributed_moe(..., backend="cuda")`` (see the module docstring).

    The constructor of :class:`mok.distributed.RankLayerRun`: ``x_local`` ``[T_local, H]`` bf16, the global
    ``topk_ids`` ``[world * T_local, K]``, fp32 ``topk_weights_local`` ``[T_local, K]``, this rank's experts
    (``[E_local, I, H]``, ``[E_local, H, I]``). ``transport`` must be ``"peers"``: the kernel reads and writes
    the peers' symmetric buffers itself. ``forward()`` -> ``[T_local, H]``; ``backward(grad)`` -> ``(dx,
    d_topk_weights, d_w_gate, d_w_up, d_w_down)`` of this rank. Collective: every rank runs both.
    """

    TRANSPORTS = ("peers",)

    def __init__(self, x_local: torch.Tensor, topk_ids: torch.Tensor, topk_weights_local: torch.Tensor,
                 w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, rank: int, world: int,
                 num_experts: int, config: MoKConfig, transport: str = "peers", group=None,
                 peers: PeerGroup | None = None, precision: str | None = None, backward: bool = True) -> None:
        if transport not in self.TRANSPORTS:
            raise ValueError(f"the cuda backend reads and writes peer memory in the kernel: transport must be "
                             f"'peers', got {transport!r}")
        if not x_local.is_cuda:
            raise ValueError("backend 'cuda' needs CUDA tensors (a Hopper GPU)")
        precision = resolve_precision(precision, x_local)
        if precision != "bf16":
            raise ValueError(f"backend 'cuda' across processes supports precision 'bf16', got {precision!r}")
        check_problem(x_local, w_gate, 1, config)
        if peers is None:
            from ..distributed import default_peers
            peers = default_peers(group, x_local.device)
        if list(peers.local_ranks) != [rank]:
            raise ValueError(f"peer group drives ranks {list(peers.local_ranks)}, expected [{rank}]")
        self.x, self.topk_ids, self.topk_weights = x_local.detach().contiguous(), topk_ids, topk_weights_local
        self.w_gate, self.w_up, self.w_down = w_gate, w_up, w_down
        self.rank, self.world, self.num_experts, self.config = rank, world, num_experts, config
        self.peers, self.wants_backward = peers, backward
        self.schedule = build_kernel_schedule(topk_ids, num_experts, world, BLOCK_M, config.capacity_rows)
        self.saved_gate_up: torch.Tensor | None = None

    def forward(self) -> torch.Tensor:
        tokens, hidden = self.x.shape
        top_k = self.topk_ids.shape[1]
        peers, rank, world = self.peers, self.rank, self.world
        x_buf = peers.buffer("cuda_x", (tokens, hidden), torch.bfloat16)
        weight_buf = peers.buffer("cuda_topk_weights", (tokens * top_k,), torch.float32)
        fuse_top1 = default_fuse_top1(top_k)
        if fuse_top1:  # the down epilogue writes the weighted rows into the sources' outputs
            out_buf = peers.buffer("cuda_out", (tokens, hidden), torch.bfloat16)
            out, combine_ptrs, out_ptrs = out_buf[rank], out_buf.ptr_table, out_buf.ptr_table
        else:
            slots = peers.buffer("cuda_slots", (tokens * top_k, hidden), torch.bfloat16)
            out, combine_ptrs = torch.empty(tokens, hidden, dtype=torch.bfloat16, device=self.x.device), slots.ptr_table
            out_ptrs = torch.full((world,), out.data_ptr(), dtype=torch.int64, device=self.x.device)  # only [rank] read
        x_buf[rank].copy_(self.x)
        weight_buf[rank].copy_(self.topk_weights.reshape(-1))
        experts, combine = rank_launches(
            self.schedule, rank, x=x_buf[rank], weights=weight_buf[rank], out=out, x_ptrs=x_buf.ptr_table,
            weight_ptrs=weight_buf.ptr_table, combine_ptrs=combine_ptrs, out_ptrs=out_ptrs, w_gate=self.w_gate,
            w_up=self.w_up, w_down=self.w_down, config=self.config, fuse_top1=fuse_top1)
        self.saved_gate_up = saved_gate_up_buffer(experts) if self.wants_backward else None
        mode = start_error_checks()

        def run(prep: Sm90Launch, **kwargs) -> None:
            launch(prep, dispatch="ring", **kwargs)  # MoK's pull dispatch into the ring (no gather across GPUs)
            finish_error_check(prep, mode)

        peers.barrier()  # every rank's rows are published; every rank is done with its last call's slots
        run(experts, saved_gate_up=self.saved_gate_up)
        peers.barrier()  # every GPU's pushes into this rank's slots (or output) have landed
        if fuse_top1:
            return out.clone()  # the symmetric buffer is overwritten by the next call
        run(combine)
        return out

    def backward(self, grad_out: torch.Tensor):
        """The Triton pipeline's backward across processes on the saved gate/up rows (no forward work again but
        pulling the token rows)."""
        from ..triton_ref.pipeline import TritonRankRun

        if self.saved_gate_up is None and self.wants_backward:
            raise RuntimeError("forward() has not run on this CudaRankRun")
        run = TritonRankRun(self.x, self.topk_ids, self.topk_weights, self.w_gate.detach(), self.w_up.detach(),
                            self.w_down.detach(), rank=self.rank, world=self.world, num_experts=self.num_experts,
                            config=self.config, transport="peers", peers=self.peers, precision="bf16",
                            backward=True, schedule=self.schedule)
        with torch.no_grad():
            grads = run.backward_without_forward(grad_out.contiguous(), self.saved_gate_up)
        self.saved_gate_up = None
        return grads
