"""SwiGLU and its backward with the router-weight gradient fused in: the arithmetic every backend follows.

Per routed row (token t, slot k, expert e), with ``gate = W_gate[e] x`` and ``up = W_up[e] x``:

    forward   h = silu(gate) * up                      y = W_down[e] h        out[t] += w[t,k] * y
    backward  g = W_down[e]^T dO[t]                    (the down projection's dgrad, unscaled)
              dw[t,k] = <g, h>                         (= <dO[t], y>: the router-weight gradient, no y stored)
              dh = w[t,k] * g
              d_gate = dh * up * silu'(gate)           d_up = dh * silu(gate)

``dO`` is pulled unscaled and the router weight is applied here, in the epilogue, so ``dw`` never needs a
division by ``w`` (which may be 0). The down projection's weight gradient uses ``w * h`` (returned as
``h_weighted``): ``dW_down[e] = sum_rows dO^T (w h)``.

Rounding contract (bf16 mode): gate and up are rounded to the activation dtype first (that is what the
forward stores for the backward), then everything here is computed in fp32 from those rounded values, so the
forward and a replayed or backward computation see the same ``h``.
"""

from __future__ import annotations

import torch


def swiglu_forward(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """fp32 ``silu(gate) * up`` from (rounded) pre-activations."""
    gate, up = gate.float(), up.float()
    return gate * torch.sigmoid(gate) * up


def swiglu_backward(gate: torch.Tensor, up: torch.Tensor, g: torch.Tensor, weight: torch.Tensor):
    """The fused SwiGLU backward for a block of rows.

    Args:
        gate, up: ``[rows, I]`` pre-activations (as stored by the forward).
        g: ``[rows, I]`` fp32, ``W_down^T dO`` (unscaled).
        weight: ``[rows]`` fp32 router weight of each row (0 on padding rows).

    Returns fp32 tensors ``(d_gate [rows, I], d_up [rows, I], dw [rows], h [rows, I], h_weighted [rows, I])``.
    """
    gate, up = gate.float(), up.float()
    sig = torch.sigmoid(gate)
    silu = gate * sig
    h = silu * up
    dw = (g * h).sum(dim=1)
    dh = weight[:, None] * g
    d_gate = dh * up * (sig * (1.0 + gate * (1.0 - sig)))
    d_up = dh * silu
    return d_gate, d_up, dw, h, weight[:, None] * h
