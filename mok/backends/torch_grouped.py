"""The PyTorch baseline: what a careful PyTorch user writes (background.md's "PyTorch" column).

argsort the routed rows by expert, gather, ``torch._grouped_mm`` for the three expert GEMMs (a per-expert
loop of ``mm`` where grouped GEMM is unavailable, e.g. on a CPU), and an ``index_add`` combine. Autograd
provides the backward.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _grouped_mm_available(x: torch.Tensor) -> bool:
    return (x.is_cuda and hasattr(torch, "_grouped_mm") and x.dtype == torch.bfloat16
            and torch.cuda.get_device_capability(x.device)[0] >= 9)


def _grouped(a: torch.Tensor, w: torch.Tensor, offsets: torch.Tensor, counts: list[int] | None) -> torch.Tensor:
    """Rows of ``a`` (sorted by expert, group ends at ``offsets``) times ``w[e].T``; ``w``: [E, N, K]."""
    if counts is None:
        return torch._grouped_mm(a, w.transpose(-2, -1), offs=offsets)
    outs, start = [], 0
    for expert, count in enumerate(counts):
        outs.append(a[start:start + count] @ w[expert].T)
        start += count
    return torch.cat(outs)


def torch_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1, precision: str = "bf16",
              config=None) -> torch.Tensor:
    del ep_size, precision, config
    tokens, top_k = topk_ids.shape
    flat = topk_ids.reshape(-1)
    order = torch.argsort(flat, stable=True)
    token = order // top_k
    counts = torch.bincount(flat, minlength=w_gate.shape[0])
    offsets = counts.cumsum(0).to(torch.int32)
    host_counts = None if _grouped_mm_available(x) else counts.tolist()

    xs = x[token]
    gate = _grouped(xs, w_gate, offsets, host_counts)
    up = _grouped(xs, w_up, offsets, host_counts)
    y = _grouped(F.silu(gate) * up, w_down, offsets, host_counts)
    weighted = y.float() * topk_weights.reshape(-1)[order, None].float()
    out = torch.zeros(tokens, x.shape[1], dtype=torch.float32, device=x.device).index_add(0, token, weighted)
    return out.to(x.dtype)
