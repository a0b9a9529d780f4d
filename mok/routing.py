"""Top-k routing with deterministic tie-breaking."""

from __future__ import annotations

import torch

from .checks import check_route_inputs


def route(logits: torch.Tensor, top_k: int, *, scoring: str = "softmax", renormalize: bool = True,
          check_inputs: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick ``top_k`` experts per token.

    Args:
        logits: ``[T, E]`` router logits (any float dtype; scored in fp32). Must be finite.
        top_k: experts per token.
        scoring: ``"softmax"`` (scores sum to 1 over all experts) or ``"sigmoid"`` (independent scores,
            DeepSeek-V3 style).
        renormalize: rescale each token's chosen scores to sum to 1.

    Returns:
        ``(topk_weights [T, top_k] fp32, topk_ids [T, top_k] int32)``, ids ordered by descending score.
        Ties go to the lower expert id (a stable sort, not ``torch.topk``, whose tie order is unspecified),
        so routing, and everything downstream, is reproducible bit for bit. ``topk_weights`` is
        differentiable with respect to ``logits``.
    """
    if check_inputs:
        check_route_inputs(logits, top_k, scoring)
    logits = logits.float()
    scores = torch.softmax(logits, dim=-1) if scoring == "softmax" else torch.sigmoid(logits)
    # Stable descending sort: among equal scores the lower index comes first.
    ids = torch.sort(scores.detach(), dim=-1, descending=True, stable=True).indices[:, :top_k]
    weights = scores.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)
