"""Top-k routing with deterministic tie-breaking."""

from __future__ import annotations

import os

import torch

from .checks import check_route_inputs


def route(logits: torch.Tensor, top_k: int, *, scoring: str = "softmax", renormalize: bool = True,
          check_inputs: bool = True, method: str | None = None,
          backward: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Pick ``top_k`` experts per token.

    Args:
        logits: ``[T, E]`` router logits (any float dtype; scored in fp32). Must be finite.
        top_k: experts per token.
        scoring: ``"softmax"`` (scores sum to 1 over all experts) or ``"sigmoid"`` (independent scores,
            DeepSeek-V3 style).
        renormalize: rescale each token's chosen scores to sum to 1.
        method: ``"torch"`` (PyTorch ops around the top-k selection), ``"fused"`` (one Triton kernel selects and
            weighs, :func:`mok.triton_ref.router_topk.router_topk_weights`; CUDA tensors, or CPU tensors under
            ``TRITON_INTERPRET=1``, up to its expert limit; its backward: see ``backward``) or ``"auto"``:
            ``"fused"`` for CUDA logits of bf16, fp16 or fp32 within the kernel's expert limit, ``"torch"``
            otherwise (round 25's call 1 on the H200: 3.0-4.4 us instead of
            19.5-22.7 at the EP-64 slices, the layer with its router 0.91-1.00x the time).
            Default ``MOK_ROUTE``, else ``"auto"`` (``MOK_ROUTE=fused`` falls back to ``"torch"`` where the kernel
            cannot run). On Hopper the fused method's selection may run in mok's CUDA top-k instead of the Triton
            kernel (``MOK_ROUTE_TOPK``, :mod:`mok.cuda.router_topk`): the same ids and weights, bit for bit. The
            ids are the same for both methods; the weights agree to a few units in the last place (same
            mathematics, other rounding), and each method's are the same bits on every call.
        backward: the fused method's backward: ``"kernel"``
            (:func:`mok.triton_ref.router_topk_backward.router_topk_backward`: one launch instead of a dozen and a
            nested autograd graph; fp32 rounding, not the PyTorch ops' bits; round 27, H200: the qwen slice's
            training step with its router 0.78x the time, kimi 0.996x, anchor-2 0.995x), ``"torch"`` (the PyTorch ops
            recomputed and differentiated, so their gradients bit for bit) or ``"auto"`` (default,
            ``MOK_ROUTE_BACKWARD``): the kernel for CUDA logits, the PyTorch ops elsewhere (the fused method on the
            CPU runs only under ``TRITON_INTERPRET=1``, where the kernel would be slow). A backward that builds a
            graph (``create_graph=True``) takes the PyTorch ops either way.

    Returns:
        ``(topk_weights [T, top_k] fp32, topk_ids [T, top_k] int32)``, ids ordered by descending logit (softmax
        and sigmoid are monotone, so these are the ``top_k`` highest scores; two logits that round to the same
        score keep the logits' order). Equal logits go to the lower expert id (not ``torch.topk``, whose tie
        order is unspecified), so routing, and everything downstream, is reproducible bit for bit.
        ``topk_weights`` is differentiable with respect to ``logits``.
    """
    choice = os.environ.get("MOK_ROUTE", "auto") if method is None else method
    if choice not in ("auto", "torch", "fused"):
        raise ValueError(f"the routing method (method or MOK_ROUTE) must be 'auto', 'torch' or 'fused', got "
                         f"{choice!r}")
    backward = os.environ.get("MOK_ROUTE_BACKWARD", "auto") if backward is None else backward
    if backward not in ("auto", "torch", "kernel"):
        raise ValueError(f"the routing's backward (backward or MOK_ROUTE_BACKWARD) must be 'auto', 'torch' or "
                         f"'kernel', got {backward!r}")
    if backward == "auto":
        backward = "kernel" if logits.is_cuda else "torch"
    if scoring not in ("softmax", "sigmoid"):  # (also without check_inputs: both methods refuse alike)
        raise ValueError(f"scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    if check_inputs:
        check_route_inputs(logits, top_k, scoring)
    # MOK_ROUTE=fused applies where the kernel can run; method="fused" asks for it (and its errors) outright.
    if choice == "auto":
        use_fused = logits.is_cuda and logits.dtype in _FUSED_AUTO_DTYPES and _fused_route_applies(logits)
    else:
        use_fused = choice == "fused" and (method is not None or _fused_route_applies(logits))
    if use_fused:
        return _FusedRoute.apply(logits, int(top_k), scoring, renormalize, backward)
    logits = logits.float()
    ids = _topk_ids(logits.detach(), top_k)
    return _weights_of(logits, ids, scoring, renormalize), ids


# The dtypes whose fp32 scores the kernel forms as ``logits.float()`` does (exactly: a widening, or fp32 itself).
_FUSED_AUTO_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def _fused_route_applies(logits: torch.Tensor) -> bool:
    """Whether the fused kernel can route ``logits``: a CUDA tensor (or a CPU one under ``TRITON_INTERPRET=1``) of up
    to its expert limit."""
    from .triton_ref._common import INTERPRETING  # noqa: PLC0415 (Triton only when asked for)
    from .triton_ref.router_topk import MAX_EXPERTS  # noqa: PLC0415

    on_device = logits.is_cuda or (INTERPRETING and logits.device.type == "cpu")
    return on_device and logits.dim() == 2 and logits.shape[1] <= MAX_EXPERTS


def _weights_of(logits: torch.Tensor, ids: torch.Tensor, scoring: str, renormalize: bool) -> torch.Tensor:
    """The chosen experts' weights from fp32 ``logits`` in PyTorch ops (differentiable)."""
    scores = torch.softmax(logits, dim=-1) if scoring == "softmax" else torch.sigmoid(logits)
    weights = scores.gather(1, ids.long())
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights


class _FusedRoute(torch.autograd.Function):
    """``route(method="fused")``: the kernel's weights and ids forward; the backward differentiates the PyTorch ops
    of :func:`_weights_of` at the saved logits and ids (recomputed: one definition of the gradient), or with
    ``backward="kernel"`` runs :func:`mok.triton_ref.router_topk_backward.router_topk_backward`. The logits
    themselves are saved, so changing them in place after routing makes the backward raise (autograd's version
    check)."""

    @staticmethod
    def forward(ctx, logits, top_k, scoring, renormalize, backward):
        weights, ids = _fused_select(logits.detach(), top_k, scoring, renormalize)
        ctx.save_for_backward(logits, ids)
        ctx.scoring, ctx.renormalize, ctx.backward_method = scoring, renormalize, backward
        ctx.mark_non_differentiable(ids)
        return weights, ids

    @staticmethod
    def backward(ctx, grad_weights, _grad_ids):
        logits, ids = ctx.saved_tensors
        if ctx.backward_method == "kernel" and not torch.is_grad_enabled():  # (a graph: the PyTorch ops below)
            from .triton_ref.router_topk_backward import router_topk_backward  # noqa: PLC0415

            grad = router_topk_backward(logits.detach(), ids, grad_weights, scoring=ctx.scoring,
                                        renormalize=ctx.renormalize)
            return grad, None, None, None, None
        with torch.enable_grad():
            weights = _weights_of(logits.float(), ids, ctx.scoring, ctx.renormalize)
        # At the saved logits themselves, with a graph when one is asked for (create_graph): second derivatives,
        # through .backward() or autograd.grad alike, are the PyTorch ops' own.
        (grad,) = torch.autograd.grad(weights, logits, grad_weights, create_graph=torch.is_grad_enabled())
        return grad, None, None, None, None


def _fused_select(logits: torch.Tensor, top_k: int, scoring: str,
                  renormalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused method's ``(weights, ids)``: the CUDA top-k where ``MOK_ROUTE_TOPK`` and its limits allow
    (:mod:`mok.cuda.router_topk`: the same bits, faster on wide routers), else the Triton kernel."""
    if logits.is_cuda:
        from .cuda.router_topk import select_topk  # noqa: PLC0415

        selected = select_topk(logits, top_k, (scoring, renormalize))
        if selected is not None:
            return selected
    from .triton_ref.router_topk import router_topk_weights  # noqa: PLC0415 (Triton only when used)

    return router_topk_weights(logits, top_k, scoring=scoring, renormalize=renormalize)


def _topk_ids(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """``[T, top_k]`` int32 ids of each row's largest fp32 logits, equal ones in ascending id. On a GPU a selection
    kernel (the CUDA one where ``MOK_ROUTE_TOPK`` allows, :mod:`mok.cuda.router_topk`, else
    :mod:`mok.triton_ref.router_topk`); elsewhere, or for very wide routers, a stable descending sort, which gives the
    same ids (the CPU tests check the Triton kernel against it, the GPU tests both)."""
    if logits.is_cuda:
        from .cuda.router_topk import select_topk  # noqa: PLC0415
        from .triton_ref.router_topk import MAX_EXPERTS, router_topk_ids  # noqa: PLC0415

        selected = select_topk(logits, top_k, None)
        if selected is not None:
            return selected[1]
        if logits.shape[1] <= MAX_EXPERTS:
            return router_topk_ids(logits, top_k)
    return torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :top_k].to(torch.int32)
