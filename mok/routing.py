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
        ``(topk_weights [T, top_k] fp32, topk_ids [T, top_k] int32)``, ids ordered by descending logit (softmax
        and sigmoid are monotone, so these are the ``top_k`` highest scores; two logits that round to the same
        score keep the logits' order). Equal logits go to the lower expert id (not ``torch.topk``, whose tie
        order is unspecified), so routing, and everything downstream, is reproducible bit for bit.
        ``topk_weights`` is differentiable with respect to ``logits``.
    """
    if check_inputs:
        check_route_inputs(logits, top_k, scoring)
    logits = logits.float()
    scores = torch.softmax(logits, dim=-1) if scoring == "softmax" else torch.sigmoid(logits)
    ids = _topk_ids(logits.detach(), top_k)
    weights = scores.gather(1, ids.long())
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def _topk_ids(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """``[T, top_k]`` int32 ids of each row's largest fp32 logits, equal ones in ascending id. On a GPU a selection
    kernel (:mod:`mok.triton_ref.router_topk`); elsewhere, or for very wide routers, a stable descending sort, which
    gives the same ids (the CPU tests check the kernel against it)."""
    if logits.is_cuda:
        from .triton_ref.router_topk import MAX_EXPERTS, router_topk_ids
        if logits.shape[1] <= MAX_EXPERTS:
            return router_topk_ids(logits, top_k)
    return torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :top_k].to(torch.int32)
