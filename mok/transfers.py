"""The four transfers of an MoE layer, in PyTorch, driven by one schedule table.

These are the reference semantics the Triton kernels (``mok/triton_ref/pull_dispatch.py``,
``push_combine.py``) and the CUDA megakernel implement. Each works on a window of rows ``[start, end)`` of one
expert-side rank's table, as a ring minibatch does. Only two primitives are needed:

* :func:`pull_rows` (the expert side reads from the source rank): forward dispatch pulls token rows,
  backward reverse-combine pulls dO rows and router weights;
* :func:`push_rows` (the expert side writes into the source rank's (token, k) slot): forward combine pushes
  expert outputs, backward reverse-dispatch pushes dx rows and router-weight gradients.

Loops run over peer ranks, never over tokens.
"""

from __future__ import annotations

import torch

from .comm import PeerBuffer
from .schedule import RankSchedule


def pull_rows(table: RankSchedule, start: int, end: int, src: PeerBuffer, out: torch.Tensor,
              *, by_token: bool) -> None:
    """``out[j] = src[src_rank[start + j]][index]`` for the table rows ``[start, end)``; zero on padding rows.

    ``index`` is the source token (``src_slot // top_k``) when ``by_token`` (token buffers such as ``x`` and
    ``dO``, shape ``[T_local, ...]``), else the slot itself (per-(token, k) buffers, shape ``[T_local*top_k, ...]``).
    """
    src_rank = table.src_rank[start:end]
    src_slot = table.src_slot[start:end].to(torch.int64)
    index = src_slot // table.top_k if by_token else src_slot
    out.zero_()
    for peer in range(src.world_size):
        take = src_rank == peer
        out[take] = src[peer][index[take]].to(out.dtype)


def push_rows(table: RankSchedule, start: int, end: int, values: torch.Tensor, dst: PeerBuffer) -> None:
    """``dst[src_rank[r]][src_slot[r]] = values[r - start]`` for the real rows ``r`` in ``[start, end)``.

    ``dst`` holds one entry per (token, k) slot: shape ``[T_local * top_k, ...]`` on every rank. Padding rows
    are skipped. Each slot has exactly one writer across all ranks, so the order of pushes cannot matter.
    """
    src_rank = table.src_rank[start:end]
    src_slot = table.src_slot[start:end].to(torch.int64)
    for peer in range(dst.world_size):
        take = src_rank == peer
        dst[peer][src_slot[take]] = values[take].to(dst.dtype)


def sum_over_k(slots: torch.Tensor, top_k: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """The fixed-order combine: ``out[t] = sum_k weights[t, k] * slots[t*top_k + k]`` in fp32, k ascending.

    ``slots``: ``[T_local * top_k, H]``; ``weights``: ``[T_local, top_k]`` fp32 or None (plain sum, as for dx).
    Returns fp32 ``[T_local, H]``; the caller rounds to its output dtype. The explicit loop fixes the order of
    additions, which a reduction kernel (``torch.sum``) does not promise.
    """
    per_token = slots.view(-1, top_k, slots.shape[-1])
    acc = torch.zeros(per_token.shape[0], per_token.shape[-1], dtype=torch.float32, device=slots.device)
    for k in range(top_k):
        term = per_token[:, k].float()
        acc += term if weights is None else weights[:, k:k + 1].float() * term
    return acc
