"""The autograd wrapper shared by every backend that runs MoK's algorithm as a "layer run".

A layer run (the reference's :class:`~mok.backends.reference.LayerRun`, the Triton pipeline's run, a per-rank
run across processes) is built by the forward and keeps what its backward needs: the schedule, the rings and
the peers' buffers. Its ``backward`` is MoK's explicit backward (pull reverse-combine, fused SwiGLU backward
with the router-weight gradient, push reverse-dispatch), not autograd through the forward, so the wrapper only
hands the gradient over and returns the five gradients in the inputs' order.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch


def _on_device(device: torch.device):
    """Make ``device`` current for kernel launches (Triton launches on the current CUDA device)."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


class LayerRunFunction(torch.autograd.Function):
    """``LayerRunFunction.apply(x, topk_weights, w_gate, w_up, w_down, make_run) -> out``.

    ``make_run(x, topk_weights, w_gate, w_up, w_down)`` builds the run; the run provides ``forward() -> out`` and
    ``backward(grad_out) -> (dx, d_topk_weights, d_w_gate, d_w_up, d_w_down)``.
    """

    @staticmethod
    def forward(ctx, x, topk_weights, w_gate, w_up, w_down, make_run: Callable):
        with _on_device(x.device):
            run = make_run(x, topk_weights, w_gate, w_up, w_down)
            out = run.forward()
        ctx.run = run
        ctx.weights_dtype = topk_weights.dtype
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        run, ctx.run = ctx.run, None  # free the rings and buffers as soon as the backward is done
        with _on_device(grad_out.device):
            dx, d_weights, d_gate, d_up, d_down = run.backward(grad_out.contiguous())
        return dx, d_weights.to(ctx.weights_dtype), d_gate, d_up, d_down, None
