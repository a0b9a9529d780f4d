"""The routing's backward: the gradient of the chosen experts' weights with respect to the router logits, in one
kernel.

Reads / writes
    ``logits [T, E]`` (any float dtype, read in fp32), ``ids [T, K]`` int32 (the chosen experts, distinct in a row)
    and ``grad_weights [T, K]`` fp32 in; ``grad_logits [T, E]`` in the logits' dtype out.

The mathematics (per token; ``c_k`` the chosen logits, ``g_k`` the weights' gradient, ``<g, w>`` = ``sum_k g_k w_k``)
    * softmax, renormalised: the weights are a softmax over the chosen logits alone (:mod:`.router_topk`), so
      ``dc_k = w_k (g_k - <g, w>)`` and every other logit's gradient is 0.
    * softmax over all experts: ``w_k = p[id_k]`` with ``p`` the full row's softmax, so every expert ``e`` gets
      ``-p_e <g, w>``, and a chosen one ``p_e g_k`` on top.
    * sigmoid: ``w_k = s_k = sigmoid(c_k)`` and ``dc_k = g_k s_k (1 - s_k)``; renormalised, ``w_k = s_k / S`` with
      ``S = sum_k s_k``, and ``g_k`` becomes ``(g_k - <g, w>) / S`` before the sigmoid's derivative.

Why a kernel of its own
    :func:`mok.route`'s fused method recomputes the PyTorch ops of the weights in its backward and differentiates
    them with a nested ``autograd.grad``: a dozen small launches and an autograd graph on the host for every step.
    At the qwen slice, whose backward is host-bound, the profiler put 1.2 ms of CPU time there (round 26, call 8).
    Here it is one launch.

Tiling
    As the forward's, and the weights are the forward's own (:func:`.router_topk.chosen_weights`): a program owns
    ``BLOCK_T`` whole rows (``BLOCK_E`` = E rounded up to a power of two). The K chosen gradients are added into
    the row's tile one expert at a time, in k order, so each token's gradient depends on its own logits, ids and
    gradient alone: the same bits for any batch split. The PyTorch ops compute the same mathematics in another
    order (and a chosen softmax's non-chosen gradient, exactly 0 here, comes out there as rounding residue), so the
    two agree to fp32 rounding, not bit for bit.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import cdiv, check_device, next_power_of_2, round_to
from .router_topk import MAX_EXPERTS, chosen_weights, default_tiling


@triton.jit
def router_topk_backward_kernel(logits_ptr, ids_ptr, grad_ptr, out_ptr, num_tokens, num_experts, stride_logits,
                                stride_out, TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                                BLOCK_K: tl.constexpr, SIGMOID: tl.constexpr, RENORMALIZE: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    slot = tl.arange(0, BLOCK_K)
    row_ok = rows < num_tokens
    kept = row_ok[:, None] & (slot[None, :] < TOP_K)
    ids = tl.load(ids_ptr + rows[:, None].to(tl.int64) * TOP_K + slot[None, :], mask=kept, other=0)
    g = tl.load(grad_ptr + rows[:, None].to(tl.int64) * TOP_K + slot[None, :], mask=kept, other=0.0)
    chosen = tl.load(logits_ptr + rows[:, None].to(tl.int64) * stride_logits + ids, mask=kept,
                     other=float("-inf")).to(tl.float32)
    # The row's own tile: every expert's gradient starts at 0 (at -p_e <g, w> for a softmax over all experts).
    out = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.float32)
    if SIGMOID:
        s = chosen_weights(chosen, kept, row_ok, 1.0, True, False)
        if RENORMALIZE:
            total = tl.where(row_ok, tl.sum(s, axis=1), 1.0)
            g = (g - tl.sum(g * (s / total[:, None]), axis=1)[:, None]) / total[:, None]
        dc = g * s * (1.0 - s)
    elif RENORMALIZE:
        w = chosen_weights(chosen, kept, row_ok, 1.0, False, True)
        dc = w * (g - tl.sum(g * w, axis=1)[:, None])
    else:
        row = row_ok[:, None] & (cols[None, :] < num_experts)
        values = tl.load(logits_ptr + rows[:, None].to(tl.int64) * stride_logits + cols[None, :], mask=row,
                         other=float("-inf")).to(tl.float32)
        row_max = tl.where(row_ok, tl.max(values, axis=1), 0.0)  # (0 past the last token: nothing is NaN there)
        p = tl.where(row, tl.exp(values - row_max[:, None]), 0.0)
        denominator = tl.where(row_ok, tl.sum(p, axis=1), 1.0)
        w = chosen_weights(chosen, kept, row_ok, denominator, False, False)
        out = -(p / denominator[:, None]) * tl.sum(g * w, axis=1)[:, None]
        dc = w * g
    for k in tl.static_range(TOP_K):
        # Column k of the [BLOCK_T, BLOCK_K] tiles (Triton has no indexable arrays), added where its expert sits.
        expert = tl.sum(tl.where(slot[None, :] == k, ids, 0), axis=1)
        value = tl.sum(tl.where(slot[None, :] == k, dc, 0.0), axis=1)
        out += tl.where(cols[None, :] == expert[:, None], value[:, None], 0.0)
    mask = row_ok[:, None] & (cols[None, :] < num_experts)
    tl.store(out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :],
             round_to(out, out_ptr.dtype.element_ty), mask=mask)


def router_topk_backward(logits: torch.Tensor, ids: torch.Tensor, grad_weights: torch.Tensor, *,
                         scoring: str = "softmax", renormalize: bool = True) -> torch.Tensor:
    """``grad_logits [T, E]`` (the logits' dtype) of the weights :func:`.router_topk.router_topk_weights` gives for
    ``logits`` and ``ids``, from their gradient ``grad_weights [T, K]`` (see the module docstring). No autograd
    here: :func:`mok.route` wraps it."""
    check_device(logits, ids, grad_weights)
    if scoring not in ("softmax", "sigmoid"):
        raise ValueError(f"scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    if logits.dim() != 2 or ids.dim() != 2 or ids.shape[0] != logits.shape[0]:
        raise ValueError(f"logits must be [T, E] and ids [T, K], got {tuple(logits.shape)} and {tuple(ids.shape)}")
    if tuple(grad_weights.shape) != tuple(ids.shape):
        raise ValueError(f"grad_weights must be shaped like ids {tuple(ids.shape)}, got {tuple(grad_weights.shape)}")
    num_tokens, num_experts = logits.shape
    top_k = ids.shape[1]
    if top_k < 1:
        raise ValueError("ids must name at least one expert per token")
    if num_experts > MAX_EXPERTS:
        raise ValueError(f"the routing's backward keeps a row in registers: at most {MAX_EXPERTS} experts, got "
                         f"{num_experts}")
    logits = logits if logits.stride(1) == 1 else logits.contiguous()
    ids = ids.to(torch.int32).contiguous()
    grad = grad_weights.float().contiguous()
    out = torch.empty_like(logits, memory_format=torch.contiguous_format)
    block_e = next_power_of_2(num_experts)
    block_t, num_warps = default_tiling(block_e)
    if num_tokens:
        router_topk_backward_kernel[(cdiv(num_tokens, block_t),)](
            logits, ids, grad, out, num_tokens, num_experts, logits.stride(0), out.stride(0), TOP_K=top_k,
            BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_K=next_power_of_2(top_k), SIGMOID=scoring == "sigmoid",
            RENORMALIZE=renormalize, num_warps=num_warps)
    return out
