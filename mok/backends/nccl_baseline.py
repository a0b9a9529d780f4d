"""The NCCL baseline for expert parallelism: all-to-all dispatch, grouped GEMMs, all-to-all combine.

What a PyTorch user writes with ``torch.distributed`` (the "NCCL+PyTorch" line MoK compares against):

1. sort this rank's (token, k) rows by expert id (so by destination rank, experts being contiguous per rank);
2. exchange the per-expert row counts (``all_to_all_single`` of ``[world, E_local]`` integers, then one host
   synchronisation for the split sizes);
3. **dispatch**: ``all_to_all_single`` of the token rows; the receiver regroups them by local expert;
4. the three expert GEMMs with ``torch._grouped_mm`` (a per-expert loop of ``mm`` on a CPU or where grouped GEMM
   is unavailable), SwiGLU in between;
5. **combine**: ``all_to_all_single`` back, then the router-weighted ``index_add`` in fp32.

Autograd differentiates everything; the two exchanges go through :class:`mok.distributed.ExchangeRows`, whose
backward is the reverse exchange. Not bitwise reproducible across EP degrees (``index_add`` order, GEMM
shapes that depend on the routing); checked against the fp64 oracle by tolerance.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .torch_grouped import _grouped, _grouped_mm_available


def nccl_moe(x_local: torch.Tensor, topk_ids_local: torch.Tensor, topk_weights_local: torch.Tensor,
             w_gate_local: torch.Tensor, w_up_local: torch.Tensor, w_down_local: torch.Tensor, *, group=None,
             num_experts: int) -> torch.Tensor:
    """The all-to-all baseline: what ``distributed_moe(..., backend="nccl")`` runs once it has checked the shapes.

    Args:
        x_local: ``[T_local, H]`` this rank's tokens. topk_ids_local: ``[T_local, K]`` global expert ids.
        topk_weights_local: ``[T_local, K]`` router weights. w_gate_local, w_up_local: ``[E_local, I, H]``;
        w_down_local: ``[E_local, H, I]`` (rank r holds experts ``[r*E_local, (r+1)*E_local)``).
        group: process group (any backend with ``all_to_all_single``: NCCL, or gloo on CPUs).
        num_experts: E (global). The GEMMs run in x's dtype.

    Returns ``[T_local, H]`` in x's dtype, differentiable (autograd).
    """
    from ..distributed import ExchangeRows, exchange_rows

    world = dist.get_world_size(group)
    local_experts = num_experts // world
    tokens, top_k = topk_ids_local.shape
    device = x_local.device

    # 1. This rank's rows sorted by expert (hence by destination rank).
    flat = topk_ids_local.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    token = order // top_k
    send_per_expert = torch.bincount(flat, minlength=num_experts).view(world, local_experts)

    # 2. Row counts: recv_per_expert[s, e] rows arrive from rank s for local expert e.
    recv_per_expert = exchange_rows(send_per_expert, [1] * world, [1] * world, group)
    send_counts = send_per_expert.sum(1).tolist()
    recv_counts = recv_per_expert.sum(1).tolist()

    # 3. Dispatch, then regroup the received rows (source-major) by local expert, sources in order.
    received = ExchangeRows.apply(x_local[token], send_counts, recv_counts, group)
    expert_of_row = torch.repeat_interleave(
        torch.arange(local_experts, device=device).repeat(world), recv_per_expert.reshape(-1))
    by_expert = torch.argsort(expert_of_row, stable=True)
    rows = received[by_expert]

    # 4. Expert GEMMs.
    per_expert = recv_per_expert.sum(0)
    offsets = per_expert.cumsum(0).to(torch.int32)
    host_counts = None if _grouped_mm_available(x_local) else per_expert.tolist()
    gate = _grouped(rows, w_gate_local, offsets, host_counts)
    up = _grouped(rows, w_up_local, offsets, host_counts)
    y = _grouped(F.silu(gate) * up, w_down_local, offsets, host_counts)

    # 5. Combine: back to source order, home again, weighted sum in fp32.
    source_order = torch.empty_like(by_expert)
    source_order[by_expert] = torch.arange(by_expert.numel(), device=device)
    home = ExchangeRows.apply(y[source_order], recv_counts, send_counts, group)
    weighted = home.float() * topk_weights_local.reshape(-1)[order, None].float()
    out = torch.zeros(tokens, x_local.shape[1], dtype=torch.float32, device=device).index_add(0, token, weighted)
    return out.to(x_local.dtype)


__all__ = ["nccl_moe"]
