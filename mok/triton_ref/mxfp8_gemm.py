"""Expert-grouped MXFP8 GEMM over tile-padded segments: ``out[rows of tile t] = A[rows] @ W[tile_expert[t]]^T``.

What it reads and writes
------------------------
* ``A``: ``[M, K]`` MXFP8 rows (E4M3 codes + ``[M, K/32]`` E8M0 scales), e.g. the dispatched tokens in the
  ring, laid out as the schedule table's segments: each expert's rows padded to a multiple of ``tile_rows``.
* ``W``: ``[E, N, K]`` MXFP8 expert weights (codes + ``[E, N, K/32]`` scales), quantized along K; see
  :class:`mok.mxfp8.MXFP8Weights` for which orientation each GEMM takes.
* ``tile_expert``: ``[M / tile_rows]`` int32, the (local) expert of each tile of ``tile_rows`` rows; ``-1``
  marks a tile past the last segment: it is skipped and its output rows are **not written**.
* ``out``: ``[M, N]`` bf16 (stored) or fp32 (for a fused epilogue such as SwiGLU that wants the unrounded
  accumulator); or, with ``push=``, no ``out``: each row goes into its source rank's (token, k) slot through
  the push epilogue of :mod:`mok.triton_ref.push_combine` (the pipeline's MXFP8 down projection and dx GEMM).

How it computes (and why this way)
----------------------------------
Hopper has no block-scaled MMA, so the kernel computes exactly what "dequantize to bf16, multiply with fp32
accumulation" computes: for each ``BLOCK_K`` chunk of K (a multiple of the 32-element MX block) it loads the
E4M3 bytes and the E8M0 scale bytes of the A and W tiles, **dequantizes on chip** (value * 2^(s-127), exact in
fp32, then to bf16, exact because an E4M3 value times a power of two is a bf16 value) and feeds bf16 operands
to ``tl.dot`` with an fp32 accumulator (wgmma on sm90).

We do not use ``tl.dot_scaled``: on sm90 Triton lowers it by the same decomposition (upcast to bf16, multiply
by the broadcast scales, bf16 MMA), so it would not be faster, and the explicit form shows the arithmetic,
runs unchanged in the interpreter of any Triton version, and leaves no doubt about which roundings happen
(triton 3.6 on the H200 vs 3.9 here). FP8 wgmma with per-block promotion would be faster but does not compute
the same sums (its internal accumulation is narrower than fp32), so it is not this reference.

E4M3 decoding: on the GPU the bytes are bitcast to ``tl.float8e4nv`` and converted by the hardware; under
the interpreter they are decoded with integer bit operations (:func:`mok.triton_ref.mxfp8_quant.decode_e4m3`),
which gives identical values. The interpreter's defects (its bf16 ``tl.dot`` and its fp32 -> bf16 cast) are
handled where every kernel meets them, in :func:`mok.triton_ref._common.mma` and
:func:`mok.triton_ref._common.round_to`.

Tiling: one program per ``BLOCK_M x BLOCK_N`` output tile; ``BLOCK_M`` divides ``tile_rows`` so a program's rows
belong to one expert (one ``tile_expert`` lookup per program). The scales of a ``BLOCK_K`` chunk are loaded as
a ``[rows, BLOCK_K/32]`` tile and broadcast over their 32 elements in registers. Deterministic: K is walked
in one fixed order by one program, no split-K, no atomics, fixed launch configuration (no autotuning).

NOTE: compiled ahead of time for sm_90 with triton 3.6 (the H200's; the default config, unit-stride K): the main
loop is cp.async-pipelined loads, hardware E4M3 decodes (``cvt.rn.f16x2.e4m3x2``), ``wgmma`` m64n128k16 bf16
with fp32 accumulation, no local memory; 166 registers with a bf16 output, 165 with the push epilogue, 225 with
an fp32 output. ``python -m mok.triton_ref.mxfp8_gemm`` times a few configs
(experiments/results/h200_2026-11-29_round4/mxfp8_gemm.log).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..mxfp8 import MX_BLOCK, MXFP8Tensor
from ._common import INTERPRETING, cdiv, mma, round_to
from .mxfp8_quant import decode_e4m3, e8m0_to_fp32
from .push_combine import SlotPush, push_tile_in_halves


@dataclass(frozen=True)
class GemmConfig:
    """One fixed launch configuration (no autotuning: the same programs on every run)."""

    block_m: int = 128    # rows per program; must divide the schedule tile
    block_n: int = 128    # output columns per program
    block_k: int = 64     # K per main-loop step: a multiple of the 32-element MX block
    num_warps: int = 8    # two warpgroups, 64 rows each (wgmma M = 64)
    num_stages: int = 3   # software-pipelined loads (cp.async) in flight


DEFAULT_CONFIG = GemmConfig()


# ======================================================================================================
# On-chip dequantization of one operand tile
# ======================================================================================================
@triton.jit
def _decode(codes, HW_DECODE: tl.constexpr):
    """uint8 E4M3 codes -> fp32 values (exact)."""
    if HW_DECODE:
        values = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    else:
        values = decode_e4m3(codes)
    return values


@triton.jit
def _dequantize_tile(codes, scales, ROWS: tl.constexpr, BLOCK_K: tl.constexpr, HW_DECODE: tl.constexpr):
    """``[ROWS, BLOCK_K]`` uint8 E4M3 codes and ``[ROWS, BLOCK_K/32]`` uint8 scales -> the bf16 GEMM operand
    tile (exact: an E4M3 value times a power of two)."""
    values = _decode(codes, HW_DECODE)
    # Broadcast each scale over its 32 elements: [ROWS, G] -> [ROWS, G, 32] -> [ROWS, BLOCK_K].
    scale = e8m0_to_fp32(scales)
    scale = tl.reshape(tl.broadcast_to(scale[:, :, None], (ROWS, BLOCK_K // 32, 32)), (ROWS, BLOCK_K))
    return round_to(values * scale, tl.bfloat16)


@triton.jit
def _dequantize_tile_kn(codes, scales, BLOCK_K: tl.constexpr, COLS: tl.constexpr, HW_DECODE: tl.constexpr):
    """As :func:`_dequantize_tile` for a tile held K-first: ``[BLOCK_K, COLS]`` codes and
    ``[BLOCK_K/32, COLS]`` scales (a weight tile read as the ``[k, n]`` right-hand operand)."""
    values = _decode(codes, HW_DECODE)
    scale = e8m0_to_fp32(scales)
    scale = tl.reshape(tl.broadcast_to(scale[:, None, :], (BLOCK_K // 32, 32, COLS)), (BLOCK_K, COLS))
    return round_to(values * scale, tl.bfloat16)


# The dequantizing operand loaders as other kernels call them (the fused SwiGLU GEMMs of
# mok.triton_ref.swiglu): hardware E4M3 decode on the GPU, bit operations under the interpreter.
_HW_DECODE = tl.constexpr(not INTERPRETING)


@triton.jit
def mx_operand(codes, scales, ROWS: tl.constexpr, BLOCK_K: tl.constexpr):
    """An MXFP8 left-hand operand tile ``[ROWS, BLOCK_K]`` (uint8 codes, ``[ROWS, BLOCK_K/32]`` uint8 scales),
    dequantized on chip to the bf16 values :func:`mok.triton_ref._common.mma` multiplies (exact)."""
    return _dequantize_tile(codes, scales, ROWS, BLOCK_K, _HW_DECODE)


@triton.jit
def mx_operand_kn(codes, scales, BLOCK_K: tl.constexpr, COLS: tl.constexpr):
    """An MXFP8 right-hand operand tile ``[BLOCK_K, COLS]`` (codes; scales ``[BLOCK_K/32, COLS]``), dequantized
    on chip like :func:`mx_operand`. Loading the weight tile K-first, as the BF16 kernels do, keeps the MMA
    operands of the MXFP8 and BF16 kernels in the same shape (no transpose)."""
    return _dequantize_tile_kn(codes, scales, BLOCK_K, COLS, _HW_DECODE)


# ======================================================================================================
# Kernel
# ======================================================================================================
@triton.jit
def _mxfp8_grouped_gemm_kernel(
        a_ptr, a_scale_ptr, w_ptr, w_scale_ptr, out_ptr, tile_expert_ptr,
        M, N, K,
        stride_am, stride_ak, stride_asm, stride_asg,
        stride_we, stride_wn, stride_wk, stride_wse, stride_wsn, stride_wsg,
        stride_om, stride_on,
        src_rank_ptr, src_slot_ptr, slot_ptr_table, slot_stride,    # push epilogue (PUSH)
        TILE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
        HW_DECODE: tl.constexpr, PUSH: tl.constexpr, SLOT_DTYPE: tl.constexpr, SLOTS_ALIGNED: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)

    # ---- which expert: one lookup per program (BLOCK_M divides TILE) -------------------------------------
    expert = tl.load(tile_expert_ptr + (pid_m * BLOCK_M) // TILE)
    if expert >= 0:
        rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
        cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        col_ok = cols < N
        w_base = w_ptr + expert.to(tl.int64) * stride_we
        ws_base = w_scale_ptr + expert.to(tl.int64) * stride_wse
        offs_k = tl.arange(0, BLOCK_K)
        offs_g = tl.arange(0, BLOCK_K // 32)

        # ---- main loop: fixed K order, dequantize on chip, bf16 MMA into fp32 -------------------------------
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            k = k0 + offs_k
            g = k0 // 32 + offs_g
            k_ok = k < K
            g_ok = g < K // 32
            a_codes = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                              mask=k_ok[None, :], other=0)
            a_scales = tl.load(a_scale_ptr + rows[:, None] * stride_asm + g[None, :] * stride_asg,
                               mask=g_ok[None, :], other=127)
            w_codes = tl.load(w_base + cols[:, None] * stride_wn + k[None, :] * stride_wk,
                              mask=col_ok[:, None] & k_ok[None, :], other=0)
            w_scales = tl.load(ws_base + cols[:, None] * stride_wsn + g[None, :] * stride_wsg,
                               mask=col_ok[:, None] & g_ok[None, :], other=127)
            a = _dequantize_tile(a_codes, a_scales, BLOCK_M, BLOCK_K, HW_DECODE)
            w = _dequantize_tile(w_codes, w_scales, BLOCK_N, BLOCK_K, HW_DECODE)
            acc = mma(a, tl.trans(w), acc)

        # ---- epilogue: store in the output dtype, or push each row into its source rank's (token, k) slot ---
        if PUSH:
            push_tile_in_halves(acc, rows, pid_n * BLOCK_N, N, rows < M, src_rank_ptr, src_slot_ptr,
                                slot_ptr_table, slot_stride, SLOT_DTYPE, SLOTS_ALIGNED, BLOCK_M, BLOCK_N)
        else:
            out = round_to(acc, out_ptr.dtype.element_ty)
            tl.store(out_ptr + rows[:, None] * stride_om + cols[None, :] * stride_on, out, mask=col_ok[None, :])


# ======================================================================================================
# Launch wrapper
# ======================================================================================================
def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def mxfp8_grouped_gemm(a: MXFP8Tensor, w: MXFP8Tensor, tile_expert: torch.Tensor, tile_rows: int, *,
                       out_dtype: torch.dtype = torch.bfloat16, out: torch.Tensor | None = None,
                       config: GemmConfig | None = None, hw_decode: bool | None = None,
                       push: SlotPush | None = None) -> torch.Tensor | None:
    """``out[r] = dequant(A)[r] @ dequant(W[tile_expert[r // tile_rows]])^T`` with fp32 accumulation.

    Same calling convention as :func:`mok.triton_ref.grouped_gemm.grouped_gemm_forward`, with MXFP8 operands,
    including its push epilogue (``push=``: row r goes into its source rank's (token, k) slot, rounded once to
    the slots' dtype; padding rows and skipped tiles push nothing; nothing is stored, None is returned). The
    pipeline's MXFP8 mode runs the forward down projection (push combine) and the backward dx GEMM (push
    reverse-dispatch) this way.

    Args:
        a: ``[M, K]`` :class:`MXFP8Tensor` quantized along K (``a.dim == 1``); ``M % tile_rows == 0``.
        w: ``[E, N, K]`` :class:`MXFP8Tensor` quantized along K (``w.dim == 2``), e.g. a field of
            :class:`mok.mxfp8.MXFP8Weights`.
        tile_expert: int32 (or int64), at least ``M / tile_rows`` entries (a window of the schedule's table may be
            longer): expert index in ``[0, E)`` of each tile, or ``-1``: the tile is skipped and its ``out``
            rows are left as they were.
        tile_rows: rows per schedule tile (the segment padding), a multiple of ``block_m``.
        out_dtype: torch.bfloat16 (rounded once from the fp32 accumulator) or torch.float32 (the accumulator).
        out: optional ``[M, N]`` tensor of ``out_dtype`` to write into (any strides); allocated (uninitialised)
            otherwise.
        config: launch configuration (default :data:`DEFAULT_CONFIG`, with ``block_m`` lowered to ``tile_rows``
            when the tile is smaller); ``block_m`` must divide ``tile_rows``.
        hw_decode: decode E4M3 with the hardware conversion (default: yes on CUDA, no under the interpreter).
    Returns:
        ``out`` ``[M, N]``.
    """
    if a.data.dim() != 2 or a.dim != 1:
        raise ValueError(f"a must be [M, K] quantized along K (dim 1), got shape {list(a.shape)}, dim {a.dim}")
    if w.data.dim() != 3 or w.dim != 2:
        raise ValueError(f"w must be [E, N, K] quantized along K (dim 2), got shape {list(w.shape)}, dim {w.dim}")
    rows, k = a.shape
    experts, n, w_k = w.shape
    if w_k != k:
        raise ValueError(f"a has K={k} but w has K={w_k}")
    if config is None:
        config = dataclasses.replace(DEFAULT_CONFIG, block_m=min(DEFAULT_CONFIG.block_m, tile_rows))
    block_m = config.block_m
    if tile_rows % block_m or rows % tile_rows:
        raise ValueError(f"need block_m ({block_m}) | tile_rows ({tile_rows}) | M ({rows})")
    if config.block_k % MX_BLOCK:
        raise ValueError(f"block_k ({config.block_k}) must be a multiple of {MX_BLOCK}")
    if tile_expert.dim() != 1 or tile_expert.numel() < rows // tile_rows:
        raise ValueError(f"tile_expert must have at least M / tile_rows = {rows // tile_rows} entries, "
                         f"got shape {list(tile_expert.shape)}")
    if tile_expert.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"tile_expert must be int32 or int64, got {tile_expert.dtype}")
    if out_dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"out_dtype must be bfloat16 or float32, got {out_dtype}")
    devices = {a.device, w.device, tile_expert.device}
    if len(devices) != 1:
        raise ValueError(f"a, w and tile_expert must share one device, got {sorted(map(str, devices))}")
    if push is not None:
        if out is not None:
            raise ValueError("give at most one of out= and push=")
        if push.slots.shape[1:] != (n,):
            raise ValueError(f"push target slots {push.slots.shape} do not have {n} columns")
        if push.slots.ptr_table.device != a.device:
            raise ValueError(f"the push slots' pointer table is on {push.slots.ptr_table.device}, not {a.device}")
        if config.block_n % 2:
            raise ValueError("the push epilogue stores column halves: block_n must be even")
    elif out is None:
        out = torch.empty((rows, n), dtype=out_dtype, device=a.device)
    elif tuple(out.shape) != (rows, n) or out.dtype != out_dtype or out.device != a.device:
        raise ValueError(f"out must be [{rows}, {n}] {out_dtype} on {a.device}, got {list(out.shape)} {out.dtype}")
    if rows == 0 or n == 0:
        return out
    if k == 0:
        raise ValueError("K must be positive")

    if hw_decode is None:
        hw_decode = not INTERPRETING
    a_codes, a_scales = _raw(a.data), a.scales
    w_codes, w_scales = _raw(w.data), w.scales
    grid = (rows // block_m, cdiv(n, config.block_n))
    if push is not None:
        out_args = (a_scales, 0, 0)  # unused
        push_args = (push.src_rank, push.src_slot, push.slots.ptr_table, push.row_stride)
        slot_dtype, slots_aligned = push.tl_dtype, push.aligned
    else:
        out_args = (out, out.stride(0), out.stride(1))
        push_args = (tile_expert, tile_expert, tile_expert, 0)  # unused
        slot_dtype, slots_aligned = tl.float32, False
    _mxfp8_grouped_gemm_kernel[grid](
        a_codes, a_scales, w_codes, w_scales, out_args[0], tile_expert,
        rows, n, k,
        a_codes.stride(0), a_codes.stride(1), a_scales.stride(0), a_scales.stride(1),
        w_codes.stride(0), w_codes.stride(1), w_codes.stride(2),
        w_scales.stride(0), w_scales.stride(1), w_scales.stride(2),
        out_args[1], out_args[2], *push_args,
        TILE=tile_rows, BLOCK_M=block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
        HW_DECODE=hw_decode, PUSH=push is not None, SLOT_DTYPE=slot_dtype, SLOTS_ALIGNED=slots_aligned,
        num_warps=config.num_warps, num_stages=config.num_stages)
    return None if push is not None else out


def mxfp8_grouped_gemm_torch(a: MXFP8Tensor, w: MXFP8Tensor, tile_expert: torch.Tensor, tile_rows: int, *,
                             out_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """PyTorch reference: dequantize to bf16, then per tile an fp64 product (the exact sum of the exact
    products, which the kernel's fp32 accumulation approximates), rounded to ``out_dtype``. Skipped tiles
    are NaN."""
    from ..mxfp8 import dequantize_torch

    a_values = dequantize_torch(a, torch.bfloat16).double()
    w_values = dequantize_torch(w, torch.bfloat16).double()
    out = torch.full((a.shape[0], w.shape[1]), float("nan"), dtype=torch.float64, device=a.device)
    for t, expert in enumerate(tile_expert[:a.shape[0] // tile_rows].tolist()):
        if expert >= 0:
            rows = slice(t * tile_rows, (t + 1) * tile_rows)
            out[rows] = a_values[rows] @ w_values[expert].T
    return out.to(out_dtype)


# ======================================================================================================
# Benchmark entry point (not a test): python -m mok.triton_ref.mxfp8_gemm
# ======================================================================================================
BENCHMARK_CONFIGS = (
    DEFAULT_CONFIG,
    GemmConfig(block_n=128, block_k=128, num_warps=8, num_stages=3),
    GemmConfig(block_n=256, block_k=64, num_warps=8, num_stages=3),
    GemmConfig(block_n=128, block_k=64, num_warps=8, num_stages=4),
    GemmConfig(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4),
    GemmConfig(block_n=64, block_k=128, num_warps=4, num_stages=3),
)


def _benchmark(rows: int = 16384, experts: int = 8, k: int = 7168, n: int = 2048, repeats: int = 20) -> None:
    """Time the MXFP8 grouped GEMM (a few fixed configs), the quantize kernel and torch's bf16 grouped GEMM of
    the same shape on the current GPU; one line each."""
    from ..mxfp8 import quantize

    torch.manual_seed(0)
    device = "cuda"
    tile = 128
    x = torch.randn(rows, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(experts, n, k, device=device, dtype=torch.bfloat16) * k ** -0.5
    tile_expert = (torch.arange(rows // tile, device=device) * experts // (rows // tile)).to(torch.int32)
    qa, qw = quantize(x), quantize(w, dim=2)
    offsets = torch.arange(1, experts + 1, device=device, dtype=torch.int32) * (rows // experts)

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(repeats):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / repeats * 1e-3

    flops = 2 * rows * k * n
    print(f"shape M={rows} E={experts} K={k} N={n} on {torch.cuda.get_device_name()}")
    for config in BENCHMARK_CONFIGS:
        for out_dtype in (torch.bfloat16, torch.float32):
            try:
                seconds = timed(lambda: mxfp8_grouped_gemm(qa, qw, tile_expert, tile, out_dtype=out_dtype,
                                                           config=config))
            except Exception as err:  # a config that does not fit (shared memory, registers): report, go on
                print(f"mxfp8_grouped_gemm {config} out={out_dtype}: failed: {type(err).__name__}: {err}")
                continue
            print(f"mxfp8_grouped_gemm {config} out={out_dtype}: {seconds * 1e6:9.1f} us "
                  f"{flops / seconds / 1e12:7.1f} TFLOP/s")
    quant_seconds = timed(lambda: quantize(x))
    print(f"quantize [{rows}, {k}] bf16: {quant_seconds * 1e6:9.1f} us "
          f"{(x.numel() * 2 + qa.nbytes) / quant_seconds / 1e9:7.1f} GB/s")
    try:
        seconds = timed(lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offsets))
        print(f"torch._grouped_mm bf16 (same shape): {seconds * 1e6:9.1f} us {flops / seconds / 1e12:7.1f} TFLOP/s")
    except Exception as err:  # the baseline is optional
        print(f"torch._grouped_mm unavailable: {type(err).__name__}: {err}")


if __name__ == "__main__":
    _benchmark()
