"""A fixed-tile GEMM, one output tile per program: the smallest kernel that shows SM-wave quantization.

``out[M, N] = a[M, K] @ b[N, K]^T`` with fp32 accumulation. Every program computes one ``BLOCK_M x BLOCK_N`` tile
and the grid has exactly ``ceil(M / BLOCK_M) * ceil(N / BLOCK_N)`` programs, no autotuning and no persistence,
so with one resident tile per SM the kernel runs in ``ceil(tiles / SMs)`` waves: its latency climbs in steps
exactly where :mod:`mok.heuristics` says (the default tile is the heuristic's 128 x 256). cuBLAS (``torch.matmul``)
picks its own tiles per shape, so its steps land elsewhere; the notebook ``sm_wave_threshold.ipynb`` shows both.
"""

from __future__ import annotations


import torch
import triton
import triton.language as tl

from ..heuristics import BLOCK_M, BLOCK_N, gemm_tiles
from ..triton_ref._common import INTERPRETING


@triton.jit
def _tile_gemm_kernel(a_ptr, b_ptr, out_ptr, M, N, K, stride_am, stride_bn, stride_om,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      UPCAST: tl.constexpr):
    # ---- which tile: row-major over the tile grid ----
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    # ---- main loop over K, fp32 accumulator ----
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        a = tl.load(a_ptr + rows[:, None] * stride_am + ks[None, :],
                    mask=(rows < M)[:, None] & (ks < K)[None, :], other=0.0)
        b = tl.load(b_ptr + cols[:, None] * stride_bn + ks[None, :],
                    mask=(cols < N)[:, None] & (ks < K)[None, :], other=0.0)
        if UPCAST:  # NOTE: the interpreter's bf16 tl.dot is wrong (background.md); fp32 operands are exact
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc += tl.dot(a, tl.trans(b))
    # ---- epilogue: round to the output dtype ----
    tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=(rows < M)[:, None] & (cols < N)[None, :])


def tile_gemm(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None, block_m: int = BLOCK_M,
              block_n: int = BLOCK_N, block_k: int = 64, num_warps: int = 8, num_stages: int = 3) -> torch.Tensor:
    """``a @ b.T`` with one program per ``block_m x block_n`` output tile.

    Args:
        a: ``[M, K]`` bf16/fp16/fp32, row-major.
        b: ``[N, K]`` same dtype (an nn.Linear weight: out_features first), row-major.
        out: optional ``[M, N]`` contiguous output in a's dtype (e.g. poisoned by a test); allocated if None.
    Returns:
        ``[M, N]`` in a's dtype (fp32 accumulation).
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a [M, K] and b [N, K]; got {list(a.shape)} and {list(b.shape)}")
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must share a dtype, got {a.dtype} and {b.dtype}")
    a, b = a.contiguous(), b.contiguous()
    m, k = a.shape
    n = b.shape[0]
    if out is None:
        out = torch.empty(m, n, dtype=a.dtype, device=a.device)
    elif out.shape != (m, n) or out.dtype != a.dtype or not out.is_contiguous():
        raise ValueError(f"out must be a contiguous [{m}, {n}] {a.dtype} tensor, got {list(out.shape)} {out.dtype}")
    _tile_gemm_kernel[(gemm_tiles(m, n, block_m, block_n),)](  # one program per output tile
        a, b, out, m, n, k, a.stride(0), b.stride(0), out.stride(0), BLOCK_M=block_m, BLOCK_N=block_n,
        BLOCK_K=block_k, UPCAST=INTERPRETING and a.dtype != torch.float32, num_warps=num_warps,
        num_stages=num_stages)
    return out
