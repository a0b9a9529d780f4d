"""The router's logits: ``x @ W^T`` in fp32, the input of :func:`mok.route`."""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

METHODS = ("auto", "torch", "kernel")


def router_logits(x: torch.Tensor, weight: torch.Tensor, *, method: str | None = None) -> torch.Tensor:
    """``[T, E]`` fp32 router logits of activations ``x [T, H]`` and router weights ``weight [E, H]``.

    Args:
        method: ``"torch"`` (``F.linear(x.float(), weight.float())``), ``"kernel"``
            (:func:`mok.triton_ref.router_logits.router_logits`: bf16 x, bf16 or fp32 weights, fp32 products
            without an fp32 copy of x, one order of summation per row whatever T is), or ``"auto"``: the kernel for
            CUDA tensors it takes, the PyTorch op otherwise. Default ``MOK_ROUTER``, else ``"auto"``. The two
            agree to fp32 rounding (other orders of summation), not bit for bit.

    The gradients are those of ``F.linear(x.float(), weight.float())`` either way, by the same PyTorch ops (the
    kernel's backward does not save an fp32 copy of x, it makes one).
    """
    choice = os.environ.get("MOK_ROUTER", "auto") if method is None else method
    if choice not in METHODS:
        raise ValueError(f"the router method (method or MOK_ROUTER) must be one of {METHODS}, got {choice!r}")
    if choice == "auto":
        choice = "kernel" if _kernel_takes(x, weight) else "torch"
    if choice == "torch":
        return F.linear(x.float(), weight.float())
    return _KernelRouterLogits.apply(x, weight)


def _kernel_takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return (x.is_cuda and weight.is_cuda and x.dtype == torch.bfloat16
            and weight.dtype in (torch.bfloat16, torch.float32) and x.dim() == 2)


class _KernelRouterLogits(torch.autograd.Function):
    """Forward by the kernel; backward by the PyTorch ops of ``F.linear(x.float(), weight.float())``'s own."""

    @staticmethod
    def forward(ctx, x, weight):
        from .triton_ref.router_logits import router_logits as kernel  # noqa: PLC0415 (Triton only when used)

        ctx.save_for_backward(x, weight)
        return kernel(x.detach(), weight.detach())

    @staticmethod
    def backward(ctx, grad_logits):
        x, weight = ctx.saved_tensors
        grad_x = grad_weight = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad_logits @ weight.float()).to(x.dtype)
        if ctx.needs_input_grad[1]:
            grad_weight = (grad_logits.t() @ x.float()).to(weight.dtype)
        return grad_x, grad_weight
