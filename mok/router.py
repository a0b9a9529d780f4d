"""The router's logits: ``x @ W^T`` in fp32, the input of :func:`mok.route`."""

from __future__ import annotations

import contextlib
import functools
import math
import os

import torch
import torch.nn.functional as F

METHODS = ("auto", "torch", "kernel", "cublas")

# Up to this many experts auto takes the kernel for bf16 router weights too; past it, cuBLAS's bf16 GEMM with fp32
# output (round 25, H200: the kernel 43.0-55.8 us against cuBLAS's 71.2-87.1 at the kimi, glm and deepseek slices'
# 4-6 experts, 44.5 against 44.7 at qwen's 8; at 64-256 experts cuBLAS 26-105 us against the kernel's 36-184 at its
# default tilings). Nothing was timed between 8 and 64 experts.
KERNEL_MAX_EXPERTS_BF16 = 16

BACKWARD_METHODS = ("auto", "torch", "kernel")


def router_logits(x: torch.Tensor, weight: torch.Tensor, *, method: str | None = None,
                  backward: str | None = None) -> torch.Tensor:
    """``[..., E]`` fp32 router logits of activations ``x [..., H]`` and router weights ``weight [E, H]``, also under
    autocast.

    Args:
        method: ``"torch"`` (``F.linear(x.float(), weight.float())``); ``"kernel"``
            (:func:`mok.triton_ref.router_logits.router_logits`: bf16 x, bf16 or fp32 weights, fp32 products
            without an fp32 copy of x, one order of summation per row whatever T is, so the same bits for any
            split of the tokens); ``"cublas"`` (CUDA, bf16 x and weights: ``torch.mm(x, weight.T,
            out_dtype=torch.float32)``, cuBLAS's bf16 GEMM with fp32 logits, which picks its kernel by the shape);
            or ``"auto"``: for bf16 x on a Hopper GPU (the kernel's tiles are sized for its shared memory) the
            kernel with fp32 weights, and with bf16 weights the kernel up to :data:`KERNEL_MAX_EXPERTS_BF16` experts
            and cuBLAS past them (whichever measured faster; cuBLAS's logits can depend on the token count);
            elsewhere ``"torch"``. Default ``MOK_ROUTER``, else ``"auto"``. All agree to fp32 rounding (other
            orders of summation), not bit for bit.
        backward: for the kernel and cuBLAS methods, ``"kernel"``
            (:func:`mok.triton_ref.router_logits_backward.router_logits_backward`: the same three-term trick, no
            fp32 copy of x, no fp32 GEMM, one order of summation fixed by the shape; fp32 rounding, not PyTorch's
            bits; round 26, H200: 2.7-3.5x faster than the PyTorch ops at the EP-64 slices and anchor-2); ``"torch"``:
            the PyTorch ops of ``F.linear(x.float(), weight.float())``'s backward, so the gradients are theirs bit
            for bit (they do not save an fp32 copy of x, they make one); or ``"auto"`` (default,
            ``MOK_ROUTER_BACKWARD``): the kernels for CUDA tensors on Hopper, the PyTorch ops elsewhere. A backward
            that builds a graph (``create_graph=True``), or one on a GPU other than Hopper, takes the PyTorch ops
            whatever is asked.
    """
    choice = os.environ.get("MOK_ROUTER", "auto") if method is None else method
    if choice not in METHODS:
        raise ValueError(f"the router method (method or MOK_ROUTER) must be one of {METHODS}, got {choice!r}")
    backward = os.environ.get("MOK_ROUTER_BACKWARD", "auto") if backward is None else backward
    if backward not in BACKWARD_METHODS:
        raise ValueError(f"the router's backward (backward or MOK_ROUTER_BACKWARD) must be one of "
                         f"{BACKWARD_METHODS}, got {backward!r}")
    if choice == "auto":
        choice = _auto_method(x, weight)
    if choice == "torch":
        with _no_autocast(x.device.type):  # fp32 logits under autocast too
            return F.linear(x.float(), weight.float())
    if choice == "cublas" and not (x.is_cuda and x.dtype == weight.dtype == torch.bfloat16):
        raise TypeError(f"the cublas router method takes bf16 x and weights on CUDA, got {x.dtype} and {weight.dtype} "
                        f"on {x.device}")
    rows = x.reshape(math.prod(x.shape[:-1]), x.shape[-1]) if x.dim() != 2 else x
    logits = _RouterLogits.apply(rows, weight, choice, backward)
    return logits.view(*x.shape[:-1], weight.shape[0]) if x.dim() != 2 else logits


def _auto_method(x: torch.Tensor, weight: torch.Tensor) -> str:
    if not (x.is_cuda and weight.device == x.device and x.dtype == torch.bfloat16 and x.dim() >= 2
            and _is_hopper(x.device)):
        return "torch"
    if weight.dtype == torch.float32:
        return "kernel"
    if weight.dtype == torch.bfloat16:
        return "kernel" if weight.shape[0] <= KERNEL_MAX_EXPERTS_BF16 else "cublas"
    return "torch"


def _no_autocast(device_type: str):
    """Autocast off for this device type, where it exists (not for meta tensors, say)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return contextlib.nullcontext()


def _is_hopper(device: torch.device) -> bool:
    """An NVIDIA sm_90 GPU (ROCm reports its own gfx9 parts as capability 9 too)."""
    if torch.version.hip is not None:
        return False
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _capability_major(index) == 9


@functools.lru_cache(maxsize=None)
def _capability_major(index: int) -> int:
    return torch.cuda.get_device_capability(index)[0]


class _RouterLogits(torch.autograd.Function):
    """Forward by the kernel or cuBLAS; backward by the PyTorch ops of ``F.linear(x.float(), weight.float())``'s
    own, or by the backward kernels."""

    @staticmethod
    def forward(ctx, x, weight, method, backward):
        ctx.save_for_backward(x, weight)
        ctx.backward_method = backward
        if method == "cublas":
            return torch.mm(x.detach(), weight.detach().t(), out_dtype=torch.float32)
        from .triton_ref.router_logits import router_logits as kernel  # noqa: PLC0415 (Triton only when used)

        return kernel(x.detach(), weight.detach())

    @staticmethod
    def backward(ctx, grad_logits):
        x, weight = ctx.saved_tensors
        need_x, need_weight = ctx.needs_input_grad[:2]
        # A graph (create_graph), or a GPU the kernels' tiles were not sized for: the PyTorch ops below. auto asks
        # for the kernels on CUDA tensors only (on CPU tensors they would run under Triton's interpreter).
        wanted = ctx.backward_method == "kernel" or (ctx.backward_method == "auto" and x.is_cuda)
        if wanted and not torch.is_grad_enabled() and (not x.is_cuda or _is_hopper(x.device)):
            from .triton_ref.router_logits_backward import router_logits_backward  # noqa: PLC0415

            grad_x, grad_weight = router_logits_backward(x.detach(), weight.detach(), grad_logits, need_x=need_x,
                                                         need_weight=need_weight)
            return grad_x, grad_weight, None, None
        return (*torch_backward(x, weight, grad_logits, need_x=need_x, need_weight=need_weight), None, None)


def torch_backward(x: torch.Tensor, weight: torch.Tensor, grad_logits: torch.Tensor, *, need_x: bool = True,
                   need_weight: bool = True) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_weight)`` of the logits by the PyTorch ops of ``F.linear(x.float(), weight.float())``'s own
    backward (so the same bits), each in its leaf's dtype; None where not needed."""
    grad_x = (grad_logits @ weight.float()).to(x.dtype) if need_x else None
    grad_weight = (grad_logits.t() @ x.float()).to(weight.dtype) if need_weight else None
    return grad_x, grad_weight
