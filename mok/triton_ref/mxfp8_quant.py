"""MXFP8 quantize and dequantize kernels (OCP Microscaling: E4M3 elements, one E8M0 scale per 32 elements).

The format
----------
A tensor is cut into **blocks of 32 consecutive elements along one dimension** (the GEMM's reduction dim K).
Each block stores

* 32 **E4M3** elements (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; the "fn" variant: no infinity,
  ``0x7F``/``0xFF`` are NaN, the largest finite value is ``0x7E`` = 1.75 * 2^8 = **448**; subnormals are
  ``m * 2^-9`` for ``m`` in 1..7), and
* one **E8M0** scale byte ``s``: the power of two ``2^(s - 127)``; ``s = 255`` is NaN, ``s = 0`` is 2^-127.

The block's value is ``element * 2^(s - 127)``. Quantizing a block with largest magnitude ``amax``:

1. exponent ``e = ceil(log2(amax / 448))`` -- the smallest power of two that brings the block into E4M3's
   range, so nothing has to saturate -- clamped to E8M0's ``[-127, 127]``; ``amax = 0`` (and any amax below
   448 * 2^-127) gives the minimum ``e = -127``. ``e`` is computed **exactly from the bits of amax**
   (``amax = 1.m * 2^p``: ``e = p - 8``, plus one when ``1.m > 1.75``), never with a floating-point log.
2. every element is multiplied by ``2^-e`` (exact: a power of two), clamped to +-448 (a no-op by step 1, kept
   as the spec's saturation rule), and rounded to E4M3 **round-to-nearest-even**.
3. the scale byte is ``e + 127`` (0..247 for finite inputs; 255, NaN, is never produced).

One corner of the format itself: an element within 1/16 of fp32's largest value (|x| > ~3.2e38) can round up
to ``256 * 2^120 = 2^128``, which dequantizes to +-inf in fp32 and bf16.

Non-finite inputs (documented behaviour, identical in the PyTorch reference): NaN and +-inf elements are
left out of their block's amax and stored as the E4M3 NaN code ``0x7F``; the rest of the block quantizes
normally and the scale stays finite. Dequantizing gives NaN at exactly those positions.

Encoding and decoding are written out with integer bit operations (no float8 types), so the same code runs in
the Triton interpreter and on the GPU and can be read as a specification:

* encode: normal range (``|v| >= 2^-6``) rounds the fp32 mantissa from 23 to 3 bits with the usual RNE
  trick (add ``0x7FFFF`` plus the lowest kept bit, shift); the subnormal range rounds to a multiple of 2^-9
  by adding 2^14 in fp32 (whose ulp is exactly 2^-9, so the fp32 adder does the RNE rounding).
* decode: normal codes rebias the exponent (``+120``) and shift the mantissa into place; subnormal codes are
  ``m * 2^-9``. On the GPU the GEMM may instead use the hardware conversion (identical results).

Interpreter caveat (triton 3.9): its fp32 -> bf16 cast truncates instead of rounding to nearest even and
mangles bf16 subnormals, even with ``fp_downcast_rounding="rtne"``. The kernels here round to bf16 with
:func:`mok.triton_ref._common.round_to`, which uses integer operations when interpreting; on the GPU it is the
hardware ``cvt.rn``.

What the kernels read and write
-------------------------------
Both kernels work on a ``[B, R, K]`` view (any strides) quantized along K, ``K % 32 == 0``:

* quantize:   x ``[B, R, K]`` (fp32/bf16/fp16)  ->  codes ``[B, R, K]`` uint8 and scales ``[B, R, K/32]``
  uint8 (K innermost; contiguous from :func:`quantize_blocks`, any row stride from :func:`quantize_rows_into`,
  which the pipeline uses to write packed rows: codes and scales of a row side by side).
* dequantize: codes ``[B, R, K]`` uint8 + scales ``[B, R, K/32]`` uint8  ->  out ``[B, R, K]`` (fp32/bf16).

Over a window of schedule rows the ``*_rows_into`` wrappers take the schedule's rows-in-use counter (on the
device): programs wholly past it return at once, so the grid can cover a worst-case window without a host
synchronisation (as the pull and GEMM kernels do).

Tiling: one program per ``BLOCK_R rows x BLOCK_G groups x 32`` tile, held as a 3-D register tile
``[BLOCK_R, BLOCK_G, 32]`` so each block's amax is one reduction over the last axis. The grid is
``(row tiles, group tiles, B)``. These are memory-bound kernels: a tile of a few thousand elements keeps the
loads wide and the grid large; no autotuning, so every run launches the same programs.

The ``@triton.jit`` helpers (:func:`quantize_groups`, :func:`dequantize_groups`, :func:`encode_e4m3`,
:func:`decode_e4m3`, :func:`e8m0_to_fp32`) are meant to be called from other kernels too, e.g. to quantize
``h`` along I in the gate/up GEMM's epilogue (reshape an ``[BM, BN]`` fp32 tile to ``[BM, BN/32, 32]``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..mxfp8 import MX_BLOCK
from ._common import cdiv, round_to

# Fixed launch configuration (no autotuning: every run launches the same programs).
_BLOCK_R = 16
_BLOCK_G = 8
_NUM_WARPS = 4


# ======================================================================================================
# Element and scale codecs (@triton.jit helpers, usable from any kernel)
# ======================================================================================================
@triton.jit
def mx_scale_exponent(amax):
    """E8M0 exponent ``e = ceil(log2(amax / 448))`` clamped to ``>= -127``, from the bits of ``amax``.

    amax: fp32 tensor of non-negative finite block maxima. Returns int32 exponents in ``[-127, 120]``.
    With ``amax = 1.m * 2^p``: ``amax <= 1.75 * 2^(8+e)`` holds for ``e = p - 8`` iff ``1.m <= 1.75``
    (mantissa bits ``<= 0x600000``), otherwise ``e = p - 7``. Zero and fp32 subnormals land on the clamp.
    """
    bits = amax.to(tl.int32, bitcast=True)
    biased_exponent = (bits >> 23) & 0xFF
    mantissa = bits & 0x7FFFFF
    exponent = biased_exponent - (127 + 8) + (mantissa > 0x600000).to(tl.int32)
    return tl.maximum(exponent, -127)


@triton.jit
def encode_e4m3(v):
    """fp32 ``v`` (finite, ``|v| <= 448``) -> E4M3 code in the low 8 bits of an int32, round-to-nearest-even."""
    bits = v.to(tl.int32, bitcast=True)
    sign = (bits >> 24) & 0x80
    mag_bits = bits & 0x7FFFFFFF
    # Normal range: drop 20 of the 23 mantissa bits with RNE (carry may bump the exponent), rebias 127 -> 7.
    normal = ((mag_bits + 0x7FFFF + ((mag_bits >> 20) & 1)) >> 20) - (120 << 3)
    # Subnormal range: adding 2^14 makes the fp32 ulp 2^-9, so the fp32 adder rounds |v| to m * 2^-9 (RNE);
    # m = 8 (rounded up to 2^-6) is also the right code: exponent field 1, mantissa 0.
    # NOTE: mag is rebuilt by a bitcast, so the compiler cannot fuse this add with the scaling multiply.
    shifted = mag_bits.to(tl.float32, bitcast=True) + 16384.0
    subnormal = shifted.to(tl.int32, bitcast=True) - 0x46800000
    code = tl.where(mag_bits < 0x3C800000, subnormal, normal)  # 0x3C800000 = 2^-6, E4M3's smallest normal
    return code | sign


@triton.jit
def decode_e4m3(codes):
    """E4M3 codes (uint8 or int32 tensor) -> fp32 values, exactly; ``0x7F``/``0xFF`` -> NaN."""
    c = codes.to(tl.int32)
    sign = (c & 0x80) << 24
    exponent_field = (c >> 3) & 0xF
    mantissa = c & 0x7
    normal = sign | ((exponent_field + 120) << 23) | (mantissa << 20)
    subnormal = (mantissa.to(tl.float32) * 0.001953125).to(tl.int32, bitcast=True) | sign  # m * 2^-9
    bits = tl.where(exponent_field == 0, subnormal, normal)
    bits = tl.where((c & 0x7F) == 0x7F, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e8m0_to_fp32(scales):
    """E8M0 scale bytes -> fp32 ``2^(s - 127)``; byte 0 is the fp32 subnormal 2^-127, byte 255 is NaN."""
    s = scales.to(tl.int32)
    bits = tl.where(s == 0, 0x00400000, s << 23)
    bits = tl.where(s == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def quantize_groups(x):
    """Quantize a ``[ROWS, GROUPS, 32]`` fp32 register tile along its last axis.

    Returns ``(codes, scales)``: uint8 E4M3 codes ``[ROWS, GROUPS, 32]`` and uint8 E8M0 scale bytes
    ``[ROWS, GROUPS]``. Non-finite elements are excluded from amax and encoded as NaN (``0x7F``).
    """
    bits = x.to(tl.int32, bitcast=True)
    finite = (bits & 0x7F800000) != 0x7F800000
    amax = tl.max(tl.where(finite, tl.abs(x), 0.0), axis=2)
    exponent = mx_scale_exponent(amax)
    inv_scale = ((127 - exponent) << 23).to(tl.float32, bitcast=True)  # 2^-e, a normal fp32 for e in [-127, 120]
    scaled = x * inv_scale[:, :, None]
    scaled = tl.minimum(tl.maximum(scaled, -448.0), 448.0)
    codes = tl.where(finite, encode_e4m3(scaled), 0x7F)
    return codes.to(tl.uint8), (exponent + 127).to(tl.uint8)


@triton.jit
def dequantize_groups(codes, scales):
    """``[ROWS, GROUPS, 32]`` uint8 codes and ``[ROWS, GROUPS]`` uint8 scales -> fp32 values (exact)."""
    return decode_e4m3(codes) * e8m0_to_fp32(scales)[:, :, None]


# ======================================================================================================
# Kernels
# ======================================================================================================
@triton.jit
def _quantize_kernel(x_ptr, codes_ptr, scales_ptr, R, K, stride_xb, stride_xr, stride_xk,
                     stride_cb, stride_cr, stride_sb, stride_sr, rows_in_use_ptr, window_start,
                     LIMIT_ROWS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_g = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    groups_per_row = K // 32
    if LIMIT_ROWS:  # schedule windows: programs wholly past the rows in use (read on the device) do nothing
        if window_start + pid_r * BLOCK_R >= tl.load(rows_in_use_ptr):
            return

    # ---- this program's tile: BLOCK_R rows x BLOCK_G groups x 32 lanes --------------------------------
    rows = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    groups = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)
    cols = groups[:, None] * 32 + tl.arange(0, 32)[None, :]            # [BLOCK_G, 32] element index along K
    row3 = rows[:, None, None]
    col3 = cols[None, :, :]
    mask3 = (row3 < R) & (col3 < K)

    # ---- load and quantize -------------------------------------------------------------------------------
    x = tl.load(x_ptr + batch * stride_xb + row3 * stride_xr + col3 * stride_xk, mask=mask3, other=0.0)
    codes, scales = quantize_groups(x.to(tl.float32))

    # ---- store codes [B, R, K] and scales [B, R, K/32] (unit stride along K) ---------------------------
    tl.store(codes_ptr + batch * stride_cb + row3 * stride_cr + col3, codes, mask=mask3)
    row2 = rows[:, None]
    group2 = groups[None, :]
    tl.store(scales_ptr + batch * stride_sb + row2 * stride_sr + group2, scales,
             mask=(row2 < R) & (group2 < groups_per_row))


@triton.jit
def _dequantize_kernel(codes_ptr, scales_ptr, out_ptr, R, K,
                       stride_cb, stride_cr, stride_ck, stride_sb, stride_sr, stride_sg, stride_ob, stride_or,
                       rows_in_use_ptr, window_start,
                       LIMIT_ROWS: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_G: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_g = tl.program_id(1)
    batch = tl.program_id(2).to(tl.int64)
    groups_per_row = K // 32
    if LIMIT_ROWS:  # schedule windows: programs wholly past the rows in use (read on the device) do nothing
        if window_start + pid_r * BLOCK_R >= tl.load(rows_in_use_ptr):
            return

    # ---- this program's tile ---------------------------------------------------------------------------
    rows = (pid_r * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)
    groups = pid_g * BLOCK_G + tl.arange(0, BLOCK_G)
    cols = groups[:, None] * 32 + tl.arange(0, 32)[None, :]
    row3 = rows[:, None, None]
    col3 = cols[None, :, :]
    mask3 = (row3 < R) & (col3 < K)
    row2 = rows[:, None]
    group2 = groups[None, :]
    mask2 = (row2 < R) & (group2 < groups_per_row)

    # ---- load codes and scales, decode, scale (all exact in fp32) --------------------------------------
    codes = tl.load(codes_ptr + batch * stride_cb + row3 * stride_cr + col3 * stride_ck, mask=mask3, other=0)
    scales = tl.load(scales_ptr + batch * stride_sb + row2 * stride_sr + group2 * stride_sg, mask=mask2,
                     other=127)
    values = dequantize_groups(codes, scales)

    # ---- store in the output dtype (fp32: exact; bf16: exact unless the scale is below 2^-124) ------------
    out = round_to(values, out_ptr.dtype.element_ty)
    tl.store(out_ptr + batch * stride_ob + row3 * stride_or + col3, out, mask=mask3)


# ======================================================================================================
# Launch wrappers (check, allocate, launch)
# ======================================================================================================
def _grid(batches: int, rows: int, k: int):
    return (cdiv(rows, _BLOCK_R), cdiv(k // MX_BLOCK, _BLOCK_G), batches)


def _check_view(name: str, t: torch.Tensor) -> None:
    if t.dim() != 3:
        raise ValueError(f"{name} must be a [B, R, K] view, got shape {list(t.shape)}")
    if t.shape[2] % MX_BLOCK:
        raise ValueError(f"{name}: the quantized dim K={t.shape[2]} must be a multiple of {MX_BLOCK}")
    if t.shape[0] > 65535:
        raise ValueError(f"{name}: B={t.shape[0]} exceeds the grid's z limit (65535); merge it into R")


def _row_limit(rows_in_use: torch.Tensor | None, window_start: int, like: torch.Tensor):
    """Kernel arguments of the optional device-side row limit (see :func:`quantize_rows_into`)."""
    if rows_in_use is None:
        return (like, 0, False)
    if rows_in_use.dtype != torch.int32 or rows_in_use.numel() < 1:
        raise TypeError("rows_in_use must be an int32 tensor holding the rows in use")
    return (rows_in_use, int(window_start), True)


def quantize_blocks(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize ``x`` along its last dim with the Triton kernel.

    Args:
        x: ``[B, R, K]`` float32/bfloat16/float16, any strides, ``K % 32 == 0``.
    Returns:
        ``(codes, scales)``: ``codes`` ``[B, R, K]`` torch.float8_e4m3fn, ``scales`` ``[B, R, K/32]`` uint8 E8M0
        biased exponents; both contiguous.
    """
    _check_view("x", x)
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    batches, rows, k = x.shape
    codes = torch.empty((batches, rows, k), dtype=torch.float8_e4m3fn, device=x.device)
    scales = torch.empty((batches, rows, k // MX_BLOCK), dtype=torch.uint8, device=x.device)
    if codes.numel():
        raw = codes.view(torch.uint8)
        _quantize_kernel[_grid(batches, rows, k)](
            x, raw, scales, rows, k, x.stride(0), x.stride(1), x.stride(2),
            raw.stride(0), raw.stride(1), scales.stride(0), scales.stride(1), *_row_limit(None, 0, scales),
            BLOCK_R=_BLOCK_R, BLOCK_G=_BLOCK_G, num_warps=_NUM_WARPS)
    return codes, scales


def quantize_rows_into(x: torch.Tensor, codes_out: torch.Tensor, scales_out: torch.Tensor, *,
                       rows_in_use: torch.Tensor | None = None, window_start: int = 0) -> None:
    """Quantize the rows of ``x`` along K into caller-provided (e.g. packed-row) buffers.

    Args:
        x: ``[R, K]`` float32/bfloat16, any strides, ``K % 32 == 0``.
        codes_out: ``[R, K]`` uint8 (or float8_e4m3fn) with unit column stride (any row stride).
        scales_out: ``[R, K/32]`` uint8 with unit column stride.
        rows_in_use, window_start: optional device-side limit for schedule windows: rows ``r`` with
            ``window_start + r >= rows_in_use[0]`` (int32) may be skipped (left untouched), so a kernel over a
            window of ``capacity`` rows costs only the rows in use, without a host synchronisation.
    """
    if x.dim() != 2 or x.shape[1] % MX_BLOCK:
        raise ValueError(f"x must be [R, K] with K a multiple of {MX_BLOCK}, got {list(x.shape)}")
    rows, k = x.shape
    if tuple(codes_out.shape) != (rows, k) or codes_out.stride(1) != 1 or codes_out.element_size() != 1:
        raise ValueError(f"codes_out must be a 1-byte [{rows}, {k}] tensor with unit column stride")
    if tuple(scales_out.shape) != (rows, k // MX_BLOCK) or scales_out.stride(1) != 1 or scales_out.dtype != torch.uint8:
        raise ValueError(f"scales_out must be uint8 [{rows}, {k // MX_BLOCK}] with unit column stride")
    if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"x must be float32, bfloat16 or float16, got {x.dtype}")
    if rows == 0:
        return
    raw = codes_out.view(torch.uint8)
    _quantize_kernel[_grid(1, rows, k)](
        x, raw, scales_out, rows, k, 0, x.stride(0), x.stride(1), 0, raw.stride(0), 0, scales_out.stride(0),
        *_row_limit(rows_in_use, window_start, scales_out),
        BLOCK_R=_BLOCK_R, BLOCK_G=_BLOCK_G, num_warps=_NUM_WARPS)


def dequantize_blocks(codes: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """Dequantize with the Triton kernel: ``out[b, r, k] = e4m3(codes[b, r, k]) * 2^(scales[b, r, k//32] - 127)``.

    Args:
        codes: ``[B, R, K]`` torch.float8_e4m3fn (or uint8 holding E4M3 bits), any strides.
        scales: ``[B, R, K/32]`` uint8 E8M0 biased exponents, any strides.
        dtype: torch.float32 (always exact) or torch.bfloat16 (exact unless the block's scale is below
            2^-124, scale byte < 3, where bf16 subnormals round).
    Returns:
        ``[B, R, K]`` contiguous tensor of ``dtype``.
    """
    _check_view("codes", codes)
    batches, rows, k = codes.shape
    if codes.dtype not in (torch.float8_e4m3fn, torch.uint8):
        raise TypeError(f"codes must be float8_e4m3fn (or uint8 E4M3 bits), got {codes.dtype}")
    if scales.dtype != torch.uint8 or tuple(scales.shape) != (batches, rows, k // MX_BLOCK):
        raise ValueError(f"scales must be uint8 of shape {[batches, rows, k // MX_BLOCK]}, "
                         f"got {scales.dtype} {list(scales.shape)}")
    if dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"dtype must be float32 or bfloat16, got {dtype}")
    out = torch.empty((batches, rows, k), dtype=dtype, device=codes.device)
    if out.numel():
        _launch_dequantize(codes, scales, out, None, 0)
    return out


def dequantize_rows_into(codes: torch.Tensor, scales: torch.Tensor, out: torch.Tensor, *,
                         rows_in_use: torch.Tensor | None = None, window_start: int = 0) -> None:
    """Dequantize rows from caller-provided (e.g. packed-row) buffers into ``out``.

    Args:
        codes: ``[R, K]`` uint8 (or float8_e4m3fn), any strides; scales: ``[R, K/32]`` uint8, any strides.
        out: ``[R, K]`` float32/bfloat16 with unit column stride.
        rows_in_use, window_start: as :func:`quantize_rows_into` (rows past the rows in use stay untouched).
    """
    rows, k = codes.shape
    if tuple(scales.shape) != (rows, k // MX_BLOCK) or scales.dtype != torch.uint8 or codes.element_size() != 1:
        raise ValueError("codes must be 1-byte [R, K] and scales uint8 [R, K/32]")
    if tuple(out.shape) != (rows, k) or out.stride(1) != 1 or out.dtype not in (torch.float32, torch.bfloat16):
        raise ValueError(f"out must be float32/bfloat16 [{rows}, {k}] with unit column stride")
    if rows:
        _launch_dequantize(codes[None], scales[None], out[None], rows_in_use, window_start)


def _launch_dequantize(codes, scales, out, rows_in_use, window_start) -> None:
    batches, rows, k = codes.shape
    raw = codes.view(torch.uint8)
    _dequantize_kernel[_grid(batches, rows, k)](
        raw, scales, out, rows, k, raw.stride(0), raw.stride(1), raw.stride(2),
        scales.stride(0), scales.stride(1), scales.stride(2), out.stride(0), out.stride(1),
        *_row_limit(rows_in_use, window_start, scales),
        BLOCK_R=_BLOCK_R, BLOCK_G=_BLOCK_G, num_warps=_NUM_WARPS)
