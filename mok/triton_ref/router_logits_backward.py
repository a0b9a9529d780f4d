"""The router's backward, ``logits = x @ W^T`` differentiated, without an fp32 copy of x and without fp32 GEMMs.

Reads / writes
    ``grad [T, E]`` fp32 (the logits' gradient), bf16 ``x [T, H]`` and ``weight [E, H]`` (bf16 or fp32) in;
    ``grad_x = grad @ W`` (bf16, x's dtype) and ``grad_w = grad^T @ x`` (summed in fp32, rounded once to the
    weights' dtype) out.

How
    The forward's trick (:mod:`.router_logits`) again: an fp32 operand enters a bf16 tensor-core dot as three exact
    bf16 terms (:func:`.router_logits.bf16_terms`).

    * ``grad_w``: x is bf16, so ``grad``'s three terms times x are three exact dots. ``grad_w`` has few tiles (24 at
      anchor-1's 128 experts x 1,536 columns, for a GPU of 132 SMs), so the tokens are cut into
      ``splits`` chunks (:func:`weight_grad_splits`): a program owns ``BLOCK_E`` experts x ``BLOCK_H`` columns of one
      chunk and walks its tokens in ``BLOCK_T`` steps, writing an fp32 partial sum; :func:`.push_combine.sum_over_k`
      adds each weight's partials in chunk order. Both orders are fixed by the shape (T, E, H) alone, not by the SM
      count or the programs' timing, and there are no atomics: the same inputs give the same bits on every run (for
      one GPU architecture and Triton version, which fix how a dot is lowered).
    * ``grad_x``: with fp32 weights both operands have three terms (``|mid| < 2**-7 |v|``, ``|lo| < 2**-15 |v|``);
      six products (hi*hi, hi*mid, mid*hi, hi*lo, mid*mid, lo*hi) are summed and the three smallest left out
      (mid*lo, lo*mid, lo*lo: under ``2**-21`` of ``|grad| |w|`` together, a few times fp32's own rounding and far
      under the bf16 rounding that follows); the result is rounded to bf16 once, as ``(grad @ W).to(bf16)`` is.
      A program owns
      ``BLOCK_T`` tokens x ``BLOCK_H`` columns and walks the experts; rows are independent, so a token's gradient
      is the same bits whatever the tokens beside it.

    The PyTorch ops (``F.linear(x.float(), W.float())``'s backward) make an fp32 copy of x and run two fp32 GEMMs on
    the CUDA cores; these agree with them to fp32 rounding, not bit for bit (other orders of summation). The tiles
    are sized for Hopper's shared memory. An infinite gradient or weight gives NaN here (``hi - inf``) where the
    PyTorch ops give inf; a loss scaler's check for non-finite gradients catches either.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import cdiv, check_device, mma, next_power_of_2, round_to
from .push_combine import sum_over_k
from .router_logits import bf16_terms


@triton.jit
def router_weight_grad_kernel(g_ptr, x_ptr, partial_ptr, num_tokens, hidden, num_experts, chunk_tokens, stride_g,
                              stride_x, BLOCK_E: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    """``partial[:, s] = grad[chunk s]^T @ x[chunk s]`` for one ``BLOCK_E x BLOCK_H`` tile (``partial [E, splits,
    H]``)."""
    experts = tl.program_id(0) * BLOCK_E + tl.arange(0, BLOCK_E)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    split = tl.program_id(2)
    steps = tl.arange(0, BLOCK_T)
    expert_ok = experts < num_experts
    col_ok = cols < hidden
    first = split * chunk_tokens
    last = tl.minimum(first + chunk_tokens, num_tokens)
    acc = tl.zeros([BLOCK_E, BLOCK_H], dtype=tl.float32)
    for t0 in range(first, last, BLOCK_T):  # the chunk's tokens in ascending blocks: one order of summation
        rows = t0 + steps
        row_ok = rows < last
        # grad^T's tile [BLOCK_E, BLOCK_T], read straight from grad [T, E].
        g = tl.load(g_ptr + rows[None, :].to(tl.int64) * stride_g + experts[:, None],
                    mask=expert_ok[:, None] & row_ok[None, :], other=0.0)
        x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + cols[None, :],
                    mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        hi, mid, lo = bf16_terms(g)
        acc = mma(hi, x, acc)
        acc = mma(mid, x, acc)
        acc = mma(lo, x, acc)
    # partial [E, splits, H]: an expert's chunks side by side, as sum_over_k reads them.
    out = partial_ptr + (experts[:, None] * tl.num_programs(2) + split).to(tl.int64) * hidden + cols[None, :]
    tl.store(out, acc, mask=expert_ok[:, None] & col_ok[None, :])


@triton.jit
def router_input_grad_kernel(g_ptr, w_ptr, out_ptr, num_tokens, hidden, num_experts, stride_g, stride_w, stride_out,
                             W_FP32: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                             BLOCK_H: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    lanes = tl.arange(0, BLOCK_E)
    row_ok = rows < num_tokens
    col_ok = cols < hidden
    acc = tl.zeros([BLOCK_T, BLOCK_H], dtype=tl.float32)
    for e0 in range(0, num_experts, BLOCK_E):
        experts = e0 + lanes
        expert_ok = experts < num_experts
        g = tl.load(g_ptr + rows[:, None].to(tl.int64) * stride_g + experts[None, :],
                    mask=row_ok[:, None] & expert_ok[None, :], other=0.0)
        w = tl.load(w_ptr + experts[:, None].to(tl.int64) * stride_w + cols[None, :],
                    mask=expert_ok[:, None] & col_ok[None, :], other=0.0)
        g_hi, g_mid, g_lo = bf16_terms(g)
        if W_FP32:
            w_hi, w_mid, w_lo = bf16_terms(w)
            # Largest first; mid*lo, lo*mid and lo*lo (under 2**-21 of |g| |w| together) are left out.
            acc = mma(g_hi, w_hi, acc)
            acc = mma(g_hi, w_mid, acc)
            acc = mma(g_mid, w_hi, acc)
            acc = mma(g_hi, w_lo, acc)
            acc = mma(g_mid, w_mid, acc)
            acc = mma(g_lo, w_hi, acc)
        else:
            acc = mma(g_hi, w, acc)
            acc = mma(g_mid, w, acc)
            acc = mma(g_lo, w, acc)
    out = out_ptr + rows[:, None].to(tl.int64) * stride_out + cols[None, :]
    tl.store(out, round_to(acc, tl.bfloat16), mask=row_ok[:, None] & col_ok[None, :])  # once, to nearest


def input_grad_tiling(weight_dtype: torch.dtype) -> tuple[int, int, int, int, int]:
    """grad_x's ``(BLOCK_T, BLOCK_E, BLOCK_H, num_warps, num_stages)`` for bf16 or fp32 router weights.

    Round 26's sweep on the H200 (``experiments/router_logits_bench.py --input-tilings``, eleven tilings at 6 to 256
    experts): 16 experts per step was fastest at every expert count, 64 x 128 tiles for bf16 weights (three products)
    and 128 x 128 for fp32 (six). Against the first tiling (64 experts per step, 64 x 64), bf16 / fp32: kimi slice
    74 / 118 us from 92 / 130, anchor-1 67 / 126 from 99 / 204, anchor-2 478 / 869 from 673 / 1,320."""
    return (64, 16, 128, 4, 3) if weight_dtype == torch.bfloat16 else (128, 16, 128, 4, 3)


def weight_grad_tiling(num_experts: int) -> tuple[int, int, int, int, int]:
    """grad_w's ``(BLOCK_E, BLOCK_T, BLOCK_H, num_warps, num_stages)`` for a router of ``num_experts`` columns.

    Round 26's sweep on the H200 (``experiments/router_logits_bench.py --weight-tilings``, ten tilings, each at its
    own chunk count): 128 columns per tile everywhere; 16 experts x 32 tokens per step up to 16 experts (kimi slice
    67 us from 108, qwen's 48 from 69), 64 x 64 from 64 experts on (anchor-5 64 us from 80, anchor-1 75 from 89,
    anchor-2 459 from 554). 32 experts (32 x 64) was not timed."""
    block_e = min(64, max(16, next_power_of_2(num_experts)))
    return (block_e, 32 if block_e == 16 else 64, 128, 4, 3)


# grad_w's token chunks: enough programs for a few per SM of a large GPU, and no chunk under MIN_CHUNK_TOKENS (each
# chunk's partial costs an E x H fp32 write and read). Constants, not the device's SM count: the same bits anywhere.
TARGET_PROGRAMS = 512
MIN_CHUNK_TOKENS = 1024


def token_chunks(num_tokens: int, splits: int, block_t: int) -> tuple[int, int]:
    """``(chunk_tokens, chunks)`` for ``splits`` asked: whole ``BLOCK_T`` steps per chunk (a chunk's steps are those
    of the unsplit loop), so the chunks that run can be fewer than asked (a short T)."""
    if splits < 1:
        raise ValueError(f"splits must be at least 1, got {splits}")
    chunk = cdiv(cdiv(max(num_tokens, 1), splits), block_t) * block_t
    return chunk, cdiv(max(num_tokens, 1), chunk)


def weight_grad_splits(num_tokens: int, num_experts: int, hidden: int,
                       tiling: tuple[int, ...] | None = None) -> int:
    """How many token chunks ``grad_w``'s sum is cut into for this shape (see the module docstring), at ``tiling``
    (default :func:`weight_grad_tiling`)."""
    block_e, _, block_h, _, _ = tiling or weight_grad_tiling(num_experts)
    tiles = cdiv(num_experts, block_e) * cdiv(hidden, block_h)
    return max(1, min(cdiv(TARGET_PROGRAMS, max(tiles, 1)), num_tokens // MIN_CHUNK_TOKENS))


def router_logits_backward(x: torch.Tensor, weight: torch.Tensor, grad_logits: torch.Tensor, *, need_x: bool = True,
                           need_weight: bool = True, splits: int | None = None,
                           input_tiling: tuple[int, ...] | None = None, weight_tiling: tuple[int, ...] | None = None,
                           ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(grad_x, grad_weight)`` of ``logits = x @ weight^T`` (fp32 logits of bf16 ``x``; see the module docstring):
    ``grad_x`` in x's dtype, ``grad_weight`` in the weights' dtype (summed in fp32, then cast); None where not
    needed. ``splits``: token chunks of ``grad_weight``'s sum (default :func:`weight_grad_splits`; another count
    gives other bits, for experiments); ``input_tiling`` and ``weight_tiling`` override :func:`input_grad_tiling`
    and :func:`weight_grad_tiling` (for experiments: another tiling may give other bits). No autograd here:
    :func:`mok.router_logits` wraps it."""
    check_device(x, weight, grad_logits)
    if not x.device == weight.device == grad_logits.device:
        raise ValueError(f"x, weight and grad_logits must be on one device, got {x.device}, {weight.device} and "
                         f"{grad_logits.device}")
    if x.dtype != torch.bfloat16 or weight.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"the router backward takes bf16 x and bf16 or fp32 weights, got {x.dtype} and {weight.dtype}")
    num_tokens, hidden = x.shape
    num_experts = weight.shape[0]
    if tuple(grad_logits.shape) != (num_tokens, num_experts):
        raise ValueError(f"grad_logits must be [{num_tokens}, {num_experts}], got {tuple(grad_logits.shape)}")
    x = x if x.stride(1) == 1 else x.contiguous()
    weight = weight if weight.stride(1) == 1 else weight.contiguous()
    grad = grad_logits.float()
    grad = grad if grad.stride(1) == 1 else grad.contiguous()
    grad_x = grad_weight = None
    if need_x:
        grad_x = torch.empty_like(x)
        block_t, block_e, block_h, num_warps, num_stages = input_tiling or input_grad_tiling(weight.dtype)
        if num_tokens and hidden:
            grid = (cdiv(num_tokens, block_t), cdiv(hidden, block_h))
            router_input_grad_kernel[grid](grad, weight, grad_x, num_tokens, hidden, num_experts, grad.stride(0),
                                           weight.stride(0), grad_x.stride(0), W_FP32=weight.dtype == torch.float32,
                                           BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_H=block_h, num_warps=num_warps,
                                           num_stages=num_stages)
    if need_weight:
        grad_weight = torch.empty(num_experts, hidden, dtype=weight.dtype, device=x.device)
        weight_tiling = weight_tiling or weight_grad_tiling(num_experts)
        block_e, block_t, block_h, num_warps, num_stages = weight_tiling
        splits = weight_grad_splits(num_tokens, num_experts, hidden, weight_tiling) if splits is None else splits
        chunk, splits = token_chunks(num_tokens, splits, block_t)
        # One chunk straight into fp32 weights' gradient; otherwise partials, summed (and cast) in chunk order.
        direct = splits == 1 and weight.dtype == torch.float32
        partial = grad_weight if direct else torch.empty(num_experts, splits, hidden, dtype=torch.float32,
                                                         device=x.device)
        if num_experts and hidden:
            grid = (cdiv(num_experts, block_e), cdiv(hidden, block_h), splits)
            router_weight_grad_kernel[grid](grad, x, partial, num_tokens, hidden, num_experts, chunk, grad.stride(0),
                                            x.stride(0), BLOCK_E=block_e, BLOCK_T=block_t, BLOCK_H=block_h,
                                            num_warps=num_warps, num_stages=num_stages)
            if not direct:
                sum_over_k(partial.view(num_experts * splits, hidden), splits, grad_weight)
    return grad_x, grad_weight
