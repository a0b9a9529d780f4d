"""The router's logits, ``x @ W^T`` in fp32, for bf16 activations: the GEMM in front of :mod:`.router_topk`.

Reads / writes
    ``x [T, H]`` bf16 and ``weight [E, H]`` bf16 or fp32 in, ``logits [T, E]`` fp32 out.

Why a kernel of its own
    * **fp32 router weights without fp32 activations.** A router is usually kept in fp32 (:class:`mok.MoELayer`'s
      is). ``F.linear(x.float(), w)`` first writes an fp32 copy of x (3 bytes of traffic for every byte of x), then
      runs an fp32 GEMM on the CUDA cores. Here each fp32 weight is split into three bf16 terms,
      ``w = w_hi + w_mid + w_lo`` exactly (bf16 keeps 8 of fp32's 24 significand bits, so three terms hold them
      all; :func:`bf16_terms`), and ``x @ w^T`` is three bf16 tensor-core dots into one fp32 accumulator. A bf16
      value times a bf16 term is exact in fp32, so the only rounding left is the accumulator's: on the H200 1.1-1.7e-6
      of the products' magnitudes against an fp64 oracle, where the fp32 GEMM's was 0.5-2.6e-7 (the tensor cores'
      accumulation, three passes; round 25).
    * **Few experts.** At the EP-64 slices the router has 4-8 columns, where cuBLAS's tile reads x at about
      2 TB/s (round 25's profile of the kimi slice: 115.6 us for 16,384 x 7,168 x 6); this kernel is a stream
      over x with a 16-column tile.
    * **The same bits for any split of the tokens.** Every row's dot product is summed in one fixed order, which
      depends on H and the tile only; a library GEMM chooses its kernel (split-K included) by the shape, so the
      logits of a token could change with the number of tokens beside it, and with them its experts.

Tiling
    A program owns ``BLOCK_T`` token rows and ``BLOCK_E`` experts and walks H in ``BLOCK_H`` steps, fixed by the
    expert count alone (:func:`router_logits_tiling`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import cdiv, check_device, mma, next_power_of_2


@triton.jit
def truncate_to_bf16(v):
    """fp32 ``v`` with its low 16 bits cleared: a bf16 value (exactly), never rounded up, so never past bf16's range."""
    return (v.to(tl.int32, bitcast=True) & -65536).to(tl.float32, bitcast=True)


@triton.jit
def bf16_terms(v):
    """fp32 ``v`` as three bf16 terms whose sum is ``v`` exactly, for every finite ``v`` of magnitude at least
    ``2**-103`` (below it the last term can be a bf16 subnormal, which the MMA may flush): ``hi`` is v's leading 8
    significand bits, ``mid`` the next 8 of what is left, ``lo`` the rest (at most 8 bits, so its conversion is
    exact). Truncation, not rounding, so a value near fp32's largest cannot round up to bf16's infinity, and the
    interpreter (whose conversion truncates) splits as the GPU does. A bf16 value times each term is exact in an fp32
    accumulator."""
    hi = truncate_to_bf16(v)
    rest = v - hi
    mid = truncate_to_bf16(rest)
    lo = rest - mid
    return hi.to(tl.bfloat16), mid.to(tl.bfloat16), lo.to(tl.bfloat16)


@triton.jit
def router_logits_kernel(x_ptr, w_ptr, out_ptr, num_tokens, hidden, num_experts, stride_x, stride_w, stride_out,
                         W_FP32: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                         BLOCK_H: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    experts = tl.program_id(1) * BLOCK_E + tl.arange(0, BLOCK_E)
    cols = tl.arange(0, BLOCK_H)
    row_ok = rows < num_tokens
    expert_ok = experts < num_experts
    x_rows = x_ptr + rows[:, None].to(tl.int64) * stride_x
    w_rows = w_ptr + experts[:, None].to(tl.int64) * stride_w
    acc = tl.zeros([BLOCK_T, BLOCK_E], dtype=tl.float32)
    for h0 in range(0, hidden, BLOCK_H):  # one order of summation for every row, whatever T is
        col_ok = (h0 + cols) < hidden
        x = tl.load(x_rows + h0 + cols[None, :], mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        w = tl.trans(tl.load(w_rows + h0 + cols[None, :], mask=expert_ok[:, None] & col_ok[None, :], other=0.0))
        if W_FP32:
            hi, mid, lo = bf16_terms(w)
            acc = mma(x, hi, acc)
            acc = mma(x, mid, acc)
            acc = mma(x, lo, acc)
        else:
            acc = mma(x, w, acc)
    out = out_ptr + rows[:, None].to(tl.int64) * stride_out + experts[None, :]
    tl.store(out, acc, mask=row_ok[:, None] & expert_ok[None, :])


def router_logits_tiling(num_experts: int) -> tuple[int, int, int, int, int]:
    """``(BLOCK_T, BLOCK_E, BLOCK_H, num_warps, num_stages)`` for a router of ``num_experts`` columns: the expert
    tile is the count rounded up to a power of two (at least 16, the MMA's smallest N; at most 128, beyond which
    programs split the experts). Depends on the expert count only, never on T, so every row is summed alike."""
    block_e = min(128, max(16, next_power_of_2(num_experts)))
    # Round 25's sweep on the H200 (experiments/router_logits_bench.py --tilings), fp32 weights: at 16 columns,
    # 128-wide steps of H (the kimi slice 71.5 us against 83.6 at 64 x 16 x 64; qwen 74.1, where 128 x 16 x 64 took
    # 66.6); at 128, 128-row tiles and four stages (anchor-2 609 us against 1,491, anchor-1 124 against 218; 128 x 64
    # x 64 took anchor-1 102). Between (64 experts) 64 x 64 x 64 stayed: anchor-5 130 us (128 x 64 x 64: 158),
    # anchor-3 203 (128 x 64 x 64: 173). The shared memory is sized for Hopper (mok.router_logits takes the kernel
    # there only).
    if block_e == 16:
        return 64, 16, 128, 4, 4
    if block_e == 128:
        return 128, 128, 64, 8, 4
    return 64, block_e, 64, 4, 3


def router_logits(x: torch.Tensor, weight: torch.Tensor,
                  tiling: tuple[int, int, int, int, int] | None = None) -> torch.Tensor:
    """``[T, E]`` fp32 logits of bf16 ``x [T, H]`` against ``weight [E, H]`` (bf16, or fp32 by three bf16 terms;
    see the module docstring). ``tiling`` overrides :func:`router_logits_tiling` (experiments). No autograd here:
    :func:`mok.router_logits` wraps it."""
    check_device(x, weight)
    if x.device != weight.device:
        raise ValueError(f"x and weight must be on one device, got {x.device} and {weight.device}")
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(f"x must be [tokens, hidden] and weight [experts, hidden] with one hidden size; got "
                         f"{tuple(x.shape)} and {tuple(weight.shape)}")
    if x.dtype != torch.bfloat16 or weight.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"the router kernel takes bf16 x and bf16 or fp32 weights, got {x.dtype} and {weight.dtype}")
    if x.stride(1) != 1:
        x = x.contiguous()
    if weight.stride(1) != 1:
        weight = weight.contiguous()
    num_tokens, hidden = x.shape
    num_experts = weight.shape[0]
    logits = torch.empty(num_tokens, num_experts, dtype=torch.float32, device=x.device)
    block_t, block_e, block_h, num_warps, num_stages = tiling or router_logits_tiling(num_experts)
    if num_tokens and num_experts:
        grid = (cdiv(num_tokens, block_t), cdiv(num_experts, block_e))
        router_logits_kernel[grid](x, weight, logits, num_tokens, hidden, num_experts, x.stride(0), weight.stride(0),
                                   logits.stride(0), W_FP32=weight.dtype == torch.float32, BLOCK_T=block_t,
                                   BLOCK_E=block_e, BLOCK_H=block_h, num_warps=num_warps, num_stages=num_stages)
    return logits
