"""SwiGLU fused into the expert GEMMs: the forward into the gate/up GEMM's epilogue, the backward (with the
router-weight gradient) into the down projection's dgrad epilogue. Arithmetic and rounding follow
:mod:`mok.swiglu`.

Forward (:func:`gate_up_swiglu`)
    Reads the dispatched rows ``x`` ``[n, H]`` and the local experts' ``W_gate``, ``W_up`` ``[E_local, I, H]``.
    Writes ``gate_up`` ``[n, 2I]`` (gate in columns ``[0, I)``, up in ``[I, 2I)``, rounded to the activation
    dtype: what the backward reads) and, optionally, ``h = silu(gate) * up`` ``[n, I]`` computed in fp32 from
    the *rounded* gate and up and rounded once (the down GEMM's A operand).
    A program owns a ``BLOCK_M`` x ``BLOCK_N`` block of gate **and** the matching block of up: both
    accumulators share every x tile load, and the epilogue has the gate and up values of the same columns in
    registers, so h costs no extra pass. 128 x (128 + 128) on Hopper: a 128 x 256 output tile, two warpgroups
    of 64 rows, 128 fp32 accumulator registers per thread.

Backward (:func:`down_dgrad_swiglu_backward`)
    Reads the pulled, unscaled output gradients ``dO`` ``[n, H]``, ``W_down`` ``[E_local, H, I]``, the router
    weight of each row (fp32 ``[n]``) and the stored ``gate_up``. The main loop computes
    ``g = dO @ W_down[e]`` (``[BLOCK_M, BLOCK_N]`` of ``[n, I]``, fp32 registers); the epilogue then, per row:

    * ``dw_partial[r, pid_n] = <g, h>`` over this column block (the router-weight gradient, SonicMoE-style: no
      ``y`` is ever stored); the block partials are summed in a fixed order by
      :func:`mok.triton_ref.push_combine.push_router_grad`, so no atomics and no dependence on scheduling;
    * ``dh = w * g``; ``d_gate = dh * up * silu'(gate)``, ``d_up = dh * silu(gate)`` -> ``d_gate_up`` ``[n, 2I]``
      (activation dtype: the operand of the dx and W_gate/W_up gradient GEMMs);
    * ``w * h`` -> ``hw`` ``[n, I]`` (activation dtype: the operand of the W_down gradient).

    128 x 128 tiles, and the epilogue works through g one column half at a time: it loads gate and up and
    stores three tensors per element, and addressing all of that straight from the accumulator layout would
    otherwise spill (:func:`mok.triton_ref._common.column_halves`). The row's partial for the block is
    left half + right half, in that order.

Operand loads
    With ``TileConfig.tma`` (opt-in) the bf16 / fp32 operands travel by TMA, as in
    :mod:`mok.triton_ref.grouped_gemm`: a descriptor of the window's rows of x (dO) and a 3-D one per weight,
    whose bounds replace the masks. The same tiles in the same K order, so the same bits. The MXFP8 variants
    keep their pointer loads (codes and scales dequantized on chip).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..mxfp8 import MXFP8Tensor
from ._common import (INTERPRETING, TileConfig, cdiv, check_device, column_halves, gemm_config, grouped_program_order,
                      mma, next_power_of_2, round_to, tl_dtype, tma_weight_block)
from .grouped_gemm import _descriptors
from .mxfp8_gemm import mx_operand, mx_operand_kn
from .mxfp8_quant import quantize_groups


# ========================================================================================================
# Forward: gate/up GEMM with the SwiGLU epilogue
# ========================================================================================================
@triton.jit
def _gate_up_swiglu_kernel(
    x_ptr, stride_xm,                    # [n_rows, H] dispatched rows (unit column stride); MX: E4M3 codes
    wg_ptr, wu_ptr, stride_we, stride_wi,  # W_gate, W_up: [E_local, I, H] (unit stride on H); MX: codes
    x_desc, wg_desc, wu_desc,            # USE_TMA: descriptors of x's window rows, W_gate, W_up
    tile_expert_ptr,                     # int32 [n_rows // TILE_ROWS]
    gate_up_ptr, stride_gu,              # out [n_rows, 2I]
    h_ptr, stride_h,                     # out [n_rows, I] (STORE_H); MX: E4M3 codes of h
    xs_ptr, stride_xsm,                  # MX: x scales [n_rows, H/32]
    wgs_ptr, wus_ptr, stride_wse, stride_wsi,  # MX: W_gate, W_up scales [E_local, I, H/32]
    hs_ptr, stride_hs,                   # MX (STORE_H): h scales [n_rows, I/32]
    n_rows, H, I,
    TILE_ROWS: tl.constexpr, STORE_H: tl.constexpr, ACT_DTYPE: tl.constexpr, MX: tl.constexpr, USE_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # ---- which tile, which expert --------------------------------------------------------------------
    pid_m, pid_n = grouped_program_order(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), tl.cdiv(I, BLOCK_N), GROUP_M)
    expert = tl.load(tile_expert_ptr + (pid_m * BLOCK_M) // TILE_ROWS)
    if expert < 0:
        return

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < n_rows
    col_ok = cols < I
    rows64 = rows.to(tl.int64)

    # ---- main loop: gate = x @ W_gate[e]^T and up = x @ W_up[e]^T, sharing each x tile ----------------
    acc_gate = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    acc_up = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    x_rows = x_ptr + rows64[:, None] * stride_xm
    if MX:
        # MXFP8 operand loader: codes and E8M0 scales of x and of the weights' [col, k] tiles, dequantized on
        # chip (exact) into the bf16 operands of the same MMA chain.
        xs_rows = xs_ptr + rows64[:, None] * stride_xsm
        w_cols = expert.to(tl.int64) * stride_we + cols[None, :] * stride_wi      # W[e][col, k] read as [k, col]
        ws_cols = expert.to(tl.int64) * stride_wse + cols[None, :] * stride_wsi
        gs = tl.arange(0, BLOCK_K // 32)
        for k in range(0, H, BLOCK_K):
            k_ok = (k + ks) < H
            g_ok = (k // 32 + gs) < H // 32
            x = mx_operand(tl.load(x_rows + (k + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0),
                           tl.load(xs_rows + (k // 32 + gs)[None, :], mask=row_ok[:, None] & g_ok[None, :],
                                   other=0), BLOCK_M, BLOCK_K)
            w_mask = k_ok[:, None] & col_ok[None, :]
            s_mask = g_ok[:, None] & col_ok[None, :]
            wg = mx_operand_kn(tl.load(wg_ptr + w_cols + (k + ks)[:, None], mask=w_mask, other=0),
                               tl.load(wgs_ptr + ws_cols + (k // 32 + gs)[:, None], mask=s_mask, other=0),
                               BLOCK_K, BLOCK_N)
            wu = mx_operand_kn(tl.load(wu_ptr + w_cols + (k + ks)[:, None], mask=w_mask, other=0),
                               tl.load(wus_ptr + ws_cols + (k // 32 + gs)[:, None], mask=s_mask, other=0),
                               BLOCK_K, BLOCK_N)
            acc_gate = mma(x, wg, acc_gate)
            acc_up = mma(x, wu, acc_up)
    else:
        w_cols = expert.to(tl.int64) * stride_we + cols[None, :] * stride_wi   # W[e][col, k] read as [k, col]
        for k in range(0, H, BLOCK_K):
            if USE_TMA:
                # W is [E, N=I, K=H] (nn.Linear): K-major tiles, used transposed (tma_weight_block).
                x = x_desc.load([pid_m * BLOCK_M, k])
                wg = tma_weight_block(wg_desc, expert, k, pid_n * BLOCK_N, True, BLOCK_K, BLOCK_N)
                wu = tma_weight_block(wu_desc, expert, k, pid_n * BLOCK_N, True, BLOCK_K, BLOCK_N)
            else:
                k_ok = (k + ks) < H
                x = tl.load(x_rows + (k + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                w_mask = k_ok[:, None] & col_ok[None, :]
                wg = tl.load(wg_ptr + w_cols + (k + ks)[:, None], mask=w_mask, other=0.0)
                wu = tl.load(wu_ptr + w_cols + (k + ks)[:, None], mask=w_mask, other=0.0)
            acc_gate = mma(x, wg, acc_gate)
            acc_up = mma(x, wu, acc_up)

    # ---- epilogue: round gate/up (what the backward reads), then h from the rounded values -------------
    mask = row_ok[:, None] & col_ok[None, :]
    gate = round_to(acc_gate, ACT_DTYPE)
    up = round_to(acc_up, ACT_DTYPE)
    gate_up = gate_up_ptr + rows64[:, None] * stride_gu + cols[None, :]
    tl.store(gate_up, gate, mask=mask)
    tl.store(gate_up + I, up, mask=mask)
    if STORE_H:
        gate32 = gate.to(tl.float32)
        h = round_to(gate32 * tl.sigmoid(gate32) * up.to(tl.float32), ACT_DTYPE)
        if MX:
            # h quantized along I for the down GEMM: the rounded h, in blocks of 32 columns of this tile.
            codes, scales = quantize_groups(tl.reshape(h.to(tl.float32), (BLOCK_M, BLOCK_N // 32, 32)))
            tl.store(h_ptr + rows64[:, None] * stride_h + cols[None, :], tl.reshape(codes, (BLOCK_M, BLOCK_N)),
                     mask=mask)
            groups = pid_n * (BLOCK_N // 32) + tl.arange(0, BLOCK_N // 32)
            tl.store(hs_ptr + rows64[:, None] * stride_hs + groups[None, :], scales,
                     mask=row_ok[:, None] & (groups < I // 32)[None, :])
        else:
            tl.store(h_ptr + rows64[:, None] * stride_h + cols[None, :], h, mask=mask)


def gate_up_swiglu(x_rows: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, tile_expert: torch.Tensor,
                   tile_rows: int, *, gate_up_out: torch.Tensor, h_out: torch.Tensor | None = None,
                   n_rows: int | None = None) -> None:
    """The gate/up GEMM of a window of schedule rows, with the SwiGLU forward in its epilogue.

    Args:
        x_rows: ``[>= n_rows, H]`` dispatched rows (bf16 or fp32; padding rows are zeros).
        w_gate, w_up: ``[E_local, I, H]`` contiguous, x's dtype (the rank's local experts).
        tile_expert: int32 ``[n_rows // tile_rows]`` local expert per schedule tile, -1 for unused tiles.
        tile_rows: the schedule tile (``MoKConfig.expert_padding``).
        gate_up_out: ``[>= n_rows, 2I]`` (x's dtype): gate columns ``[0, I)``, up columns ``[I, 2I)``.
        h_out: ``[>= n_rows, I]`` (x's dtype) or None (a replay in the backward only needs gate/up).
        n_rows: window rows (default ``x_rows.shape[0]``), a multiple of ``tile_rows``.
    """
    n_rows = x_rows.shape[0] if n_rows is None else n_rows
    experts, inter, hidden = w_gate.shape
    dtype = x_rows.dtype
    if n_rows % tile_rows or x_rows.shape[1] != hidden or x_rows.stride(1) != 1:
        raise ValueError(f"x_rows must be [{n_rows} (whole tiles of {tile_rows}), H={hidden}] with unit column stride")
    if w_up.shape != w_gate.shape or not (w_gate.is_contiguous() and w_up.is_contiguous()) \
            or w_gate.dtype != dtype or w_up.dtype != dtype:
        raise ValueError("w_gate and w_up must be contiguous [E_local, I, H] tensors of x's dtype")
    for name, t, width in (("gate_up_out", gate_up_out, 2 * inter), ("h_out", h_out, inter)):
        if t is not None and (t.shape[0] < n_rows or t.shape[1] != width or t.stride(1) != 1 or t.dtype != dtype):
            raise ValueError(f"{name} must be [>= {n_rows}, {width}] of x's dtype with unit column stride")
    check_device(x_rows, w_gate, w_up, tile_expert, gate_up_out)
    cfg = gemm_config("gate_up_swiglu", dtype, tile_rows, inter, hidden)
    h = h_out if h_out is not None else gate_up_out
    unused = (tile_expert, 0)
    _launch_gate_up(cfg, x_rows, w_gate, w_up, w_gate.stride(0), w_gate.stride(1), tile_expert, tile_rows,
                    gate_up_out, h, h_out is not None, n_rows, hidden, inter, tl_dtype(dtype), mx=False,
                    mx_args=(*unused, tile_expert, tile_expert, 0, 0, *unused))


def _launch_gate_up(cfg, x, wg, wu, stride_we, stride_wi, tile_expert, tile_rows, gate_up_out, h, store_h, n_rows,
                    hidden, inter, act_dtype, *, mx: bool, mx_args) -> None:
    grid = (cdiv(n_rows, cfg.block_m) * cdiv(inter, cfg.block_n),)
    descriptors = None if mx else _tma_descriptors(cfg, x, n_rows, (wg, wu), w_k_major=True)
    _gate_up_swiglu_kernel[grid](
        x, x.stride(0), wg, wu, stride_we, stride_wi, *(descriptors or (x, wg, wu)), tile_expert,
        gate_up_out, gate_up_out.stride(0), h, h.stride(0), *mx_args, n_rows, hidden, inter,
        TILE_ROWS=tile_rows, STORE_H=store_h, ACT_DTYPE=act_dtype, MX=mx, USE_TMA=descriptors is not None,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _mx_rows(name: str, q: MXFP8Tensor, n_rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(codes as uint8, scales)`` of MXFP8 rows ``[>= n_rows, width]`` quantized along the row (any row stride)."""
    codes, scales = q.data.view(torch.uint8), q.scales
    if q.dim != 1 or codes.dim() != 2 or codes.shape[0] < n_rows or codes.shape[1] != width \
            or codes.stride(1) != 1 or scales.stride(1) != 1:
        raise ValueError(f"{name} must be MXFP8 rows [>= {n_rows}, {width}] quantized along the row, unit "
                         f"column stride; got {list(codes.shape)} quantized along dim {q.dim}")
    return codes, scales


def _mx_weight(name: str, q: MXFP8Tensor, shape: tuple[int, int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``(codes as uint8, scales)`` of an MXFP8 weight ``shape`` = ``[E, N, K]`` quantized along K."""
    codes, scales = q.data.view(torch.uint8), q.scales
    if q.dim != 2 or tuple(codes.shape) != shape or codes.stride(2) != 1 or scales.stride(2) != 1:
        raise ValueError(f"{name} must be an MXFP8 weight {list(shape)} quantized along its last dim, got "
                         f"{list(codes.shape)} quantized along dim {q.dim}")
    return codes, scales


def gate_up_swiglu_mxfp8(x_rows: MXFP8Tensor, w_gate_up: MXFP8Tensor, tile_expert: torch.Tensor, tile_rows: int,
                         *, gate_up_out: torch.Tensor, h_out: MXFP8Tensor | None = None,
                         n_rows: int | None = None) -> None:
    """:func:`gate_up_swiglu` with MXFP8 operands and an MXFP8 ``h``: MoK's MXFP8 gate/up projection.

    The same kernel with its MXFP8 operand loader (``mok.triton_ref.mxfp8_gemm.mx_operand``: E4M3 codes and
    E8M0 scales dequantized on chip, exact, then the bf16 MMA chain with fp32 accumulation) and, in the
    epilogue, ``h`` (rounded to bf16 as in BF16 mode) quantized along I in blocks of 32 columns.

    Args:
        x_rows: MXFP8 ``[>= n_rows, H]`` dispatched rows quantized along H (e.g. views of packed ring rows).
        w_gate_up: MXFP8 ``[E_local, 2I, H]`` quantized along H (:attr:`mok.mxfp8.MXFP8Weights.gate_up_fwd`;
            gate rows ``[0, I)``, up rows ``[I, 2I)``).
        tile_expert, tile_rows, n_rows: as :func:`gate_up_swiglu`.
        gate_up_out: bf16 ``[>= n_rows, 2I]`` pre-activations (what the backward reads).
        h_out: MXFP8 ``[>= n_rows, I]`` quantized along I (the down GEMM's A operand), or None.
    """
    experts, two_inter, hidden = w_gate_up.shape
    inter = two_inter // 2
    n_rows = x_rows.shape[0] if n_rows is None else n_rows
    x_codes, x_scales = _mx_rows("x_rows", x_rows, n_rows, hidden)
    w_codes, w_scales = _mx_weight("w_gate_up", w_gate_up, (experts, two_inter, hidden))
    if n_rows % tile_rows:
        raise ValueError(f"a window holds whole schedule tiles: {n_rows} rows, tile {tile_rows}")
    if (gate_up_out.shape[0] < n_rows or gate_up_out.shape[1] != two_inter or gate_up_out.stride(1) != 1
            or gate_up_out.dtype != torch.bfloat16):
        raise ValueError(f"gate_up_out must be bf16 [>= {n_rows}, {two_inter}] with unit column stride")
    check_device(x_codes, w_codes, tile_expert, gate_up_out)
    if h_out is not None:
        h_codes, h_scales = _mx_rows("h_out", h_out, n_rows, inter)
    else:
        h_codes, h_scales = gate_up_out, x_scales  # unused
    cfg = mx_gemm_config("gate_up_swiglu", tile_rows, inter, hidden)
    _launch_gate_up(cfg, x_codes, w_codes[:, :inter], w_codes[:, inter:], w_codes.stride(0), w_codes.stride(1),
                    tile_expert, tile_rows, gate_up_out, h_codes, h_out is not None, n_rows, hidden, inter,
                    tl.bfloat16, mx=True,
                    mx_args=(x_scales, x_scales.stride(0), w_scales[:, :inter], w_scales[:, inter:],
                             w_scales.stride(0), w_scales.stride(1), h_scales, h_scales.stride(0)))


# ========================================================================================================
# Backward: down-projection dgrad with the SwiGLU backward and the router-weight gradient in its epilogue
# ========================================================================================================
@triton.jit
def _swiglu_backward_columns(g, weight, rows64, row_ok, cols, I, gate_up_ptr, stride_gu, d_gate_up_ptr, stride_dgu,
                             hw_ptr, stride_hw, ACT_DTYPE: tl.constexpr):
    """The SwiGLU backward of one column slice: stores d_gate, d_up and w*h; returns the rows' <g, h>."""
    mask = row_ok[:, None] & (cols < I)[None, :]
    # h from the stored (rounded) gate/up, in fp32
    gate_up = gate_up_ptr + rows64[:, None] * stride_gu + cols[None, :]
    gate = tl.load(gate_up, mask=mask, other=0.0).to(tl.float32)
    up = tl.load(gate_up + I, mask=mask, other=0.0).to(tl.float32)
    sig = tl.sigmoid(gate)
    silu = gate * sig
    h = silu * up
    # dh = w * g, then d_gate and d_up; w * h for the W_down gradient
    dh = weight * g
    d_gate = dh * up * (sig * (1.0 + gate * (1.0 - sig)))
    d_up = dh * silu
    d_gate_up = d_gate_up_ptr + rows64[:, None] * stride_dgu + cols[None, :]
    tl.store(d_gate_up, round_to(d_gate, ACT_DTYPE), mask=mask)
    tl.store(d_gate_up + I, round_to(d_up, ACT_DTYPE), mask=mask)
    tl.store(hw_ptr + rows64[:, None] * stride_hw + cols[None, :], round_to(weight * h, ACT_DTYPE), mask=mask)
    # router-weight gradient: the slice's share of <g, h>
    return tl.sum(g * h, axis=1)


@triton.jit
def _down_dgrad_swiglu_backward_kernel(
    dout_ptr, stride_dm,                 # [n_rows, H] pulled output gradients, unscaled; MX: E4M3 codes
    wd_ptr, stride_we, stride_wh,        # W_down: [E_local, H, I] (unit stride on I); MX: W_down^T codes
                                         # [E_local, I, H] (unit stride on H; stride_wh steps along I)
    dout_desc, wd_desc,                  # USE_TMA: descriptors of dO's window rows and W_down
    ds_ptr, stride_dsm,                  # MX: dO scales [n_rows, H/32]
    wds_ptr, stride_wse, stride_wsi,     # MX: W_down^T scales [E_local, I, H/32]
    weight_ptr,                          # fp32 [n_rows] router weight per row (0 on padding)
    gate_up_ptr, stride_gu,              # [n_rows, 2I] stored pre-activations
    tile_expert_ptr,                     # int32 [n_rows // TILE_ROWS]
    d_gate_up_ptr, stride_dgu,           # out [n_rows, 2I]
    hw_ptr, stride_hw,                   # out [n_rows, I]: w * h
    dw_partial_ptr,                      # out fp32 [n_rows, cdiv(I, BLOCK_N)]
    n_rows, H, I,
    TILE_ROWS: tl.constexpr, ACT_DTYPE: tl.constexpr, MX: tl.constexpr, USE_TMA: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # ---- which tile, which expert --------------------------------------------------------------------
    num_pid_n = tl.cdiv(I, BLOCK_N)
    pid_m, pid_n = grouped_program_order(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), num_pid_n, GROUP_M)
    expert = tl.load(tile_expert_ptr + (pid_m * BLOCK_M) // TILE_ROWS)
    if expert < 0:
        return

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < n_rows
    col_ok = cols < I
    rows64 = rows.to(tl.int64)

    # ---- main loop: g = dO @ W_down[e] (fp32, stays in registers) -------------------------------------
    g = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    dout_rows = dout_ptr + rows64[:, None] * stride_dm
    if MX:
        # MXFP8 operand loader: dO quantized along H, W_down quantized along H (its dgrad orientation, stored
        # [E, I, H]); both dequantized on chip (exact) into the bf16 MMA chain.
        ds_rows = ds_ptr + rows64[:, None] * stride_dsm
        w_cols = wd_ptr + expert.to(tl.int64) * stride_we + cols[None, :] * stride_wh     # read as [k, col]
        ws_cols = wds_ptr + expert.to(tl.int64) * stride_wse + cols[None, :] * stride_wsi
        gs = tl.arange(0, BLOCK_K // 32)
        for k in range(0, H, BLOCK_K):
            k_ok = (k + ks) < H
            g_ok = (k // 32 + gs) < H // 32
            d = mx_operand(tl.load(dout_rows + (k + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0),
                           tl.load(ds_rows + (k // 32 + gs)[None, :], mask=row_ok[:, None] & g_ok[None, :],
                                   other=0), BLOCK_M, BLOCK_K)
            w = mx_operand_kn(tl.load(w_cols + (k + ks)[:, None], mask=k_ok[:, None] & col_ok[None, :], other=0),
                              tl.load(ws_cols + (k // 32 + gs)[:, None], mask=g_ok[:, None] & col_ok[None, :],
                                      other=0), BLOCK_K, BLOCK_N)
            g = mma(d, w, g)
    else:
        w_cols = wd_ptr + expert.to(tl.int64) * stride_we + cols[None, :]
        for k in range(0, H, BLOCK_K):
            if USE_TMA:
                # W_down is [E, K=H, N=I]: its [BLOCK_K, BLOCK_N] tiles are the MMA operand as stored.
                d = dout_desc.load([pid_m * BLOCK_M, k])
                w = tma_weight_block(wd_desc, expert, k, pid_n * BLOCK_N, False, BLOCK_K, BLOCK_N)
            else:
                k_ok = (k + ks) < H
                d = tl.load(dout_rows + (k + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
                w = tl.load(w_cols + (k + ks)[:, None] * stride_wh, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
            g = mma(d, w, g)

    # ---- epilogue, one column half at a time (register budget: see column_halves) -------------------
    weight = tl.load(weight_ptr + rows, mask=row_ok, other=0.0)[:, None]
    g_left, g_right = column_halves(g, BLOCK_M, BLOCK_N)
    half_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N // 2)
    dw_partial = _swiglu_backward_columns(g_left, weight, rows64, row_ok, half_cols, I, gate_up_ptr, stride_gu,
                                          d_gate_up_ptr, stride_dgu, hw_ptr, stride_hw, ACT_DTYPE)
    dw_partial += _swiglu_backward_columns(g_right, weight, rows64, row_ok, half_cols + BLOCK_N // 2, I, gate_up_ptr,
                                           stride_gu, d_gate_up_ptr, stride_dgu, hw_ptr, stride_hw, ACT_DTYPE)
    # This column block's share of the router-weight gradient <g, h> (left half + right half, in that order).
    tl.store(dw_partial_ptr + rows64 * num_pid_n + pid_n, dw_partial, mask=row_ok)


def router_grad_partials(intermediate: int, hidden: int, dtype: torch.dtype, tile_rows: int, *,
                         mx: bool = False) -> int:
    """How many per-column-block partial dots :func:`down_dgrad_swiglu_backward` (``mx=False``) or
    :func:`down_dgrad_swiglu_backward_mxfp8` (``mx=True``) writes per row."""
    if mx:
        cfg = mx_gemm_config("down_dgrad_swiglu", tile_rows, intermediate, hidden)
    else:
        cfg = gemm_config("down_dgrad_swiglu", dtype, tile_rows, intermediate, hidden)
    return cdiv(intermediate, cfg.block_n)


def _check_backward_buffers(n_rows, tile_rows, inter, dtype, weight_rows, gate_up, d_gate_up_out, hw_out,
                            dw_partial_out, partials) -> None:
    if n_rows % tile_rows:
        raise ValueError(f"a window holds whole schedule tiles: {n_rows} rows, tile {tile_rows}")
    for name, t, width in (("gate_up", gate_up, 2 * inter), ("d_gate_up_out", d_gate_up_out, 2 * inter),
                           ("hw_out", hw_out, inter)):
        if t.shape[0] < n_rows or t.shape[1] != width or t.stride(1) != 1 or t.dtype != dtype:
            raise ValueError(f"{name} must be [>= {n_rows}, {width}] of the activation dtype, unit column stride")
    if weight_rows.dtype != torch.float32 or weight_rows.numel() < n_rows:
        raise TypeError("weight_rows must be fp32 with one weight per row")
    if (dw_partial_out.dtype != torch.float32 or not dw_partial_out.is_contiguous()
            or dw_partial_out.shape[0] < n_rows or dw_partial_out.shape[1] != partials):
        raise ValueError(f"dw_partial_out must be contiguous fp32 [>= {n_rows}, {partials}]")


def _launch_down_dgrad(cfg, dout, wd, stride_we, stride_wh, mx_args, weight_rows, gate_up, tile_expert,
                       d_gate_up_out, hw_out, dw_partial_out, n_rows, hidden, inter, tile_rows, act_dtype, mx):
    grid = (cdiv(n_rows, cfg.block_m) * cdiv(inter, cfg.block_n),)
    descriptors = None if mx else _tma_descriptors(cfg, dout, n_rows, (wd,), w_k_major=False)
    _down_dgrad_swiglu_backward_kernel[grid](
        dout, dout.stride(0), wd, stride_we, stride_wh, *(descriptors or (dout, wd)), *mx_args, weight_rows,
        gate_up, gate_up.stride(0), tile_expert, d_gate_up_out, d_gate_up_out.stride(0), hw_out, hw_out.stride(0),
        dw_partial_out, n_rows, hidden, inter,
        TILE_ROWS=tile_rows, ACT_DTYPE=act_dtype, MX=mx, USE_TMA=descriptors is not None,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def down_dgrad_swiglu_backward(grad_rows: torch.Tensor, w_down: torch.Tensor, weight_rows: torch.Tensor,
                               gate_up: torch.Tensor, tile_expert: torch.Tensor, tile_rows: int, *,
                               d_gate_up_out: torch.Tensor, hw_out: torch.Tensor, dw_partial_out: torch.Tensor,
                               n_rows: int | None = None) -> None:
    """The down projection's dgrad of a window, with the SwiGLU backward and router gradient fused in.

    Args:
        grad_rows: ``[>= n_rows, H]`` pulled output gradients (unscaled; zeros on padding rows).
        w_down: ``[E_local, H, I]`` contiguous, grad_rows' dtype.
        weight_rows: fp32 ``[>= n_rows]`` router weight of each row (0 on padding rows).
        gate_up: ``[>= n_rows, 2I]`` the forward's stored pre-activations.
        tile_expert, tile_rows, n_rows: as :func:`gate_up_swiglu`.
        d_gate_up_out: ``[>= n_rows, 2I]`` (activation dtype) ``[d_gate | d_up]``.
        hw_out: ``[>= n_rows, I]`` (activation dtype) ``w * h``.
        dw_partial_out: fp32 contiguous ``[>= n_rows, router_grad_partials(I, H, dtype, tile_rows)]``.
    """
    n_rows = grad_rows.shape[0] if n_rows is None else n_rows
    experts, hidden, inter = w_down.shape
    dtype = grad_rows.dtype
    partials = router_grad_partials(inter, hidden, dtype, tile_rows)
    if grad_rows.shape[1] != hidden or grad_rows.stride(1) != 1:
        raise ValueError(f"grad_rows must be [{n_rows} (whole tiles of {tile_rows}), H={hidden}], unit column stride")
    if not w_down.is_contiguous() or w_down.dtype != dtype:
        raise ValueError("w_down must be a contiguous [E_local, H, I] tensor of the activation dtype")
    _check_backward_buffers(n_rows, tile_rows, inter, dtype, weight_rows, gate_up, d_gate_up_out, hw_out,
                            dw_partial_out, partials)
    check_device(grad_rows, w_down, weight_rows, gate_up, tile_expert, d_gate_up_out, hw_out, dw_partial_out)
    cfg = gemm_config("down_dgrad_swiglu", dtype, tile_rows, inter, hidden)
    unused = (tile_expert, 0, tile_expert, 0, 0)
    _launch_down_dgrad(cfg, grad_rows, w_down, w_down.stride(0), w_down.stride(1), unused, weight_rows, gate_up,
                       tile_expert, d_gate_up_out, hw_out, dw_partial_out, n_rows, hidden, inter, tile_rows,
                       tl_dtype(dtype), False)


def down_dgrad_swiglu_backward_mxfp8(grad_rows: MXFP8Tensor, w_down_dgrad: MXFP8Tensor, weight_rows: torch.Tensor,
                                     gate_up: torch.Tensor, tile_expert: torch.Tensor, tile_rows: int, *,
                                     d_gate_up_out: torch.Tensor, hw_out: torch.Tensor,
                                     dw_partial_out: torch.Tensor, n_rows: int | None = None) -> None:
    """:func:`down_dgrad_swiglu_backward` with MXFP8 operands: ``g = dequant(dO) @ dequant(W_down)`` (fp32
    accumulation), then the same SwiGLU-backward epilogue (bf16 ``d_gate_up`` and ``w*h``, fp32 router partials).

    Args:
        grad_rows: MXFP8 ``[>= n_rows, H]`` pulled output gradients quantized along H (zeros on padding rows).
        w_down_dgrad: MXFP8 ``[E_local, I, H]``, W_down quantized along H
            (:attr:`mok.mxfp8.MXFP8Weights.down_dgrad`).
        dw_partial_out: fp32 contiguous ``[>= n_rows, router_grad_partials(I, H, bf16, tile_rows, mx=True)]``.
        Others as :func:`down_dgrad_swiglu_backward` (bf16).
    """
    experts, inter, hidden = w_down_dgrad.shape
    n_rows = grad_rows.shape[0] if n_rows is None else n_rows
    d_codes, d_scales = _mx_rows("grad_rows", grad_rows, n_rows, hidden)
    w_codes, w_scales = _mx_weight("w_down_dgrad", w_down_dgrad, (experts, inter, hidden))
    partials = router_grad_partials(inter, hidden, torch.bfloat16, tile_rows, mx=True)
    _check_backward_buffers(n_rows, tile_rows, inter, torch.bfloat16, weight_rows, gate_up, d_gate_up_out, hw_out,
                            dw_partial_out, partials)
    check_device(d_codes, w_codes, weight_rows, gate_up, tile_expert, d_gate_up_out, hw_out, dw_partial_out)
    cfg = mx_gemm_config("down_dgrad_swiglu", tile_rows, inter, hidden)
    _launch_down_dgrad(cfg, d_codes, w_codes, w_codes.stride(0), w_codes.stride(1),
                       (d_scales, d_scales.stride(0), w_scales, w_scales.stride(0), w_scales.stride(1)),
                       weight_rows, gate_up, tile_expert, d_gate_up_out, hw_out, dw_partial_out, n_rows, hidden,
                       inter, tile_rows, tl.bfloat16, True)


# ========================================================================================================
# TMA operand loads (bf16 / fp32 operands; the MXFP8 loaders read through pointers)
# ========================================================================================================
def _tma_descriptors(cfg: TileConfig, a: torch.Tensor, n_rows: int, weights, *, w_k_major: bool):
    """The TMA descriptors of A's window rows (``[n_rows, K]``: the rows past the window read as zero, as the
    masks do) and of each ``[E_local, ., .]`` weight (``[1, ., .]`` blocks, so a tile never reaches into the
    next expert), ``w_k_major`` as :func:`mok.triton_ref._common.tma_weight_block`; or None where TMA is off,
    the window is empty or TMA cannot address a tensor (then the kernel loads through pointers)."""
    if not cfg.tma or n_rows == 0:
        return None
    w_block = (1, cfg.block_n, cfg.block_k) if w_k_major else (1, cfg.block_k, cfg.block_n)
    return _descriptors((a, (n_rows, a.shape[1]), (cfg.block_m, cfg.block_k)),
                        *((w, w.shape, w_block) for w in weights))


# ========================================================================================================
# MXFP8 tile configurations
# ========================================================================================================
def mx_gemm_config(kernel: str, tile_rows: int, n: int, k: int) -> TileConfig:
    """The fixed configuration of the MXFP8 variant of ``kernel`` (``"gate_up_swiglu"`` or
    ``"down_dgrad_swiglu"``) for an ``n``-wide output with a ``k``-deep reduction.

    Under the interpreter: the BF16 one. On the GPU: :data:`_MX_GPU`, pinned here rather than following the
    BF16 table, because the on-chip dequantization needs registers of its own. ``block_k`` and ``block_n`` are
    whole multiples of the 32-element MX block (the epilogue quantizes h in blocks of 32 columns).
    """
    if INTERPRETING:
        cfg = gemm_config(kernel, torch.bfloat16, tile_rows, n, k)
    else:
        cfg = _MX_GPU[kernel]
        cfg = TileConfig(min(cfg.block_m, tile_rows), min(cfg.block_n, next_power_of_2(n)),
                         min(cfg.block_k, next_power_of_2(k)), cfg.group_m, cfg.num_warps, cfg.num_stages)
    return TileConfig(cfg.block_m, max(cfg.block_n, 32), max(cfg.block_k, 32), cfg.group_m, cfg.num_warps,
                      cfg.num_stages)


# Hopper, MXFP8 operands. Checked offline with ptxas for sm_90a under triton 3.6 (the H200's) and 3.9: the
# gate/up kernel (two 128 x 128 accumulators, x and both weight tiles dequantized per K step, h quantized in
# the epilogue) uses 255 registers without local memory; the down-dgrad kernel spills at BLOCK_K 64 under 3.6
# (the dequantized dO and W_down tiles next to the 128 x 128 accumulator), so it steps K by one MX block
# (236 registers, no local memory) with a deeper pipeline instead.
_MX_GPU = {
    "gate_up_swiglu": TileConfig(128, 128, 64, 8, 8, 3),
    "down_dgrad_swiglu": TileConfig(128, 128, 32, 8, 8, 4),
}
