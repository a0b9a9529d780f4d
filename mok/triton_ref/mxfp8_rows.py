"""MoK's MXFP8 mode in the Triton pipeline: packed MXFP8 rows and the dequantizing GEMMs (``precision="mxfp8"``).

This is the ``"mxfp8"`` :class:`mok.triton_ref.pipeline.RowFormat`. The pipeline (schedule, ring, barriers,
transfers, sums over k, weight-gradient chains) is the BF16 one; what changes is what a token row is and which
kernel multiplies it.

Packed rows
-----------
A row of K activations quantized along K (:mod:`mok.mxfp8`: E4M3 codes, one E8M0 scale per 32) is stored as
one byte row::

    | K code bytes | K/32 scale bytes | zero..15 pad bytes |      width = packed_width(K), a multiple of 16

so one pull moves a token's codes and scales together (``H + H/32`` bytes against ``2H`` for bf16; 7,392 vs
14,336 bytes at H = 7168), the ring holds one uint8 tensor per row kind, and the kernels read codes and scales
through two strided views of it (:func:`packed`). The pad keeps every row 16-byte aligned for vector loads.

Data flow (forward)
-------------------
* Each source rank quantizes its x ``[T_local, H]`` along H once (:func:`pack_rows`) into its published buffer.
* Pull dispatch copies packed rows through the schedule table into the ring (the BF16 kernel, moving bytes;
  padding rows become all-zero bytes: value 0).
* Gate/up GEMM: :func:`mok.triton_ref.swiglu.gate_up_swiglu_mxfp8`, the BF16 gate/up + SwiGLU kernel with an
  MXFP8 operand loader (x and ``W_gate|W_up`` dequantized on chip, exact) and an epilogue that also quantizes
  ``h`` (rounded to bf16 as in BF16 mode) along I into packed scratch rows. ``gate_up`` stays bf16 in the ring
  (the backward's SwiGLU reads it).
* Down GEMM: :func:`mok.triton_ref.mxfp8_gemm.mxfp8_grouped_gemm` (``h`` and ``W_down``, both along I) with
  the push-combine epilogue: bf16 rows into the source slots; the weighted sum over k is unchanged.

Data flow (backward)
--------------------
* Each source rank quantizes dO along H once; pull reverse-combine moves packed dO rows and the router weights.
* ``g = dO W_down``: :func:`mok.triton_ref.swiglu.down_dgrad_swiglu_backward_mxfp8` (W_down quantized along H,
  its dgrad orientation) with the unchanged SwiGLU-backward / router-gradient epilogue (bf16 ``d_gate_up``,
  ``w*h``, fp32 partials).
* ``dx``: ``[d_gate|d_up]`` quantized along 2I (:func:`pack_rows`, rows in use only), then
  :func:`mxfp8_grouped_gemm` with ``W_gate|W_up`` quantized along 2I and the push reverse-dispatch epilogue.
* Weight gradients: bf16 operands with fp32 accumulation, through the BF16 wgrad chains: the dispatched x and
  dO rows dequantized exactly to bf16 (:func:`unpack_rows`), with bf16 ``d_gate_up`` and ``w*h``. (An MXFP8
  wgrad would quantize along the token axis, per expert segment; not done.)

Every GEMM computes exactly "dequantize to bf16, multiply with fp32 accumulation" (Hopper has no block-scaled
MMA; see :mod:`mok.triton_ref.mxfp8_gemm`), every quantization is per row, and every kernel keeps the BF16
fixed reduction orders, so MXFP8 results are bitwise identical across runs, EP degrees and ring sizes.
"""

from __future__ import annotations

import torch

from ..mxfp8 import MX_BLOCK, MXFP8Tensor, MXFP8Weights
from .mxfp8_gemm import mxfp8_grouped_gemm
from .mxfp8_quant import dequantize_rows_into, quantize_rows_into
from .pipeline import RowFormat, Scratch, Window
from .swiglu import down_dgrad_swiglu_backward_mxfp8, gate_up_swiglu_mxfp8, router_grad_partials

ROW_ALIGN = 16
"""Bytes every packed row is padded to a multiple of (16-byte vector loads and stores)."""


def packed_width(k: int) -> int:
    """Bytes of one packed row of ``k`` values: codes, scales, pad to :data:`ROW_ALIGN`."""
    if k % MX_BLOCK:
        raise ValueError(f"MXFP8 rows need a multiple of {MX_BLOCK} values, got {k}")
    return -(-(k + k // MX_BLOCK) // ROW_ALIGN) * ROW_ALIGN


def packed(rows: torch.Tensor, k: int) -> MXFP8Tensor:
    """The :class:`MXFP8Tensor` ``[R, k]`` (quantized along the row) stored in packed rows ``rows`` (uint8
    ``[R, packed_width(k)]``): views, no copy."""
    if rows.dtype != torch.uint8 or rows.dim() != 2 or rows.shape[1] != packed_width(k) or rows.stride(1) != 1:
        raise ValueError(f"packed rows of {k} values must be uint8 [R, {packed_width(k)}] with unit column "
                         f"stride, got {rows.dtype} {list(rows.shape)}")
    return MXFP8Tensor(rows[:, :k].view(torch.float8_e4m3fn), rows[:, k:k + k // MX_BLOCK], 1)


def pack_rows(values: torch.Tensor, out: torch.Tensor | None = None, *, rows_in_use: torch.Tensor | None = None,
              window_start: int = 0) -> torch.Tensor:
    """Quantize ``values`` ``[R, K]`` (bf16/fp32) along K into packed rows (``out``, or a new uint8
    ``[R, packed_width(K)]`` tensor); with ``rows_in_use``/``window_start`` rows past the schedule's rows in use
    may be skipped (see :func:`mok.triton_ref.mxfp8_quant.quantize_rows_into`). Returns the packed rows."""
    rows, k = values.shape
    if out is None:
        out = torch.empty((rows, packed_width(k)), dtype=torch.uint8, device=values.device)
    q = packed(out, k)
    quantize_rows_into(values, q.data, q.scales, rows_in_use=rows_in_use, window_start=window_start)
    return out


def unpack_rows(rows: torch.Tensor, k: int, out: torch.Tensor, *, rows_in_use: torch.Tensor | None = None,
                window_start: int = 0) -> torch.Tensor:
    """Dequantize packed rows (uint8 ``[R, packed_width(k)]``) into ``out`` ``[R, k]`` (bf16: exact for every
    block scale >= 2^-124; fp32: exact); returns ``out``."""
    q = packed(rows, k)
    dequantize_rows_into(q.data, q.scales, out, rows_in_use=rows_in_use, window_start=window_start)
    return out


class MXFP8Rows(RowFormat):
    """``precision="mxfp8"``: packed MXFP8 rows, dequantizing GEMMs (module docstring)."""

    def row_storage(self, width, dtype):
        if dtype != torch.bfloat16:
            raise TypeError(f"precision='mxfp8' takes bf16 activations, got {dtype}")
        return packed_width(width), torch.uint8

    def encode(self, values, out=None):
        return pack_rows(values, out)

    def prepare_weights(self, w_gate, w_up, w_down, *, backward):
        # Through the cache: quantized once per weight version (requantized after an in-place update).
        return MXFP8Weights.quantize(w_gate, w_up, w_down, for_backward=backward)

    def local_weights(self, weights, start, stop):
        return weights.experts(start, stop)

    def gate_up(self, win, x_rows, weights, gate_up_out, h_out):
        n = win.n_rows
        gate_up_swiglu_mxfp8(packed(x_rows[:n], weights.hidden), weights.gate_up_fwd, win.tile_expert, win.tile,
                             gate_up_out=gate_up_out, h_out=None if h_out is None else packed(h_out[:n],
                                                                                               weights.intermediate),
                             n_rows=n)

    def down(self, win, h_rows, weights, push):
        n = win.n_rows
        mxfp8_grouped_gemm(packed(h_rows[:n], weights.intermediate), weights.down_fwd, win.tile_expert, win.tile,
                           push=push)

    def router_grad_partials(self, intermediate, hidden, dtype, tile):
        return router_grad_partials(intermediate, hidden, dtype, tile, mx=True)

    def down_dgrad_swiglu(self, win, grad_rows, weights, weight_rows, gate_up, d_gate_up_out, hw_out,
                          dw_partial_out):
        self._need_backward(weights)
        down_dgrad_swiglu_backward_mxfp8(packed(grad_rows[:win.n_rows], weights.hidden), weights.down_dgrad,
                                         weight_rows, gate_up, win.tile_expert, win.tile,
                                         d_gate_up_out=d_gate_up_out, hw_out=hw_out, dw_partial_out=dw_partial_out,
                                         n_rows=win.n_rows)

    def dx(self, win: Window, d_gate_up, weights, push, scratch: Scratch):
        self._need_backward(weights)
        n, width = win.n_rows, 2 * weights.intermediate
        q_rows = scratch("d_gate_up_mxfp8", packed_width(width), torch.uint8)[:n]
        pack_rows(d_gate_up[:n], q_rows, rows_in_use=win.rows_in_use, window_start=win.start)
        mxfp8_grouped_gemm(packed(q_rows, width), weights.gate_up_dgrad, win.tile_expert, win.tile, push=push)

    def values(self, win, rows, width, scratch, name):
        out = scratch(name, width, torch.bfloat16)
        unpack_rows(rows[:win.n_rows], width, out[:win.n_rows], rows_in_use=win.rows_in_use,
                    window_start=win.start)
        return out

    @staticmethod
    def _need_backward(weights: MXFP8Weights) -> None:
        if not weights.has_backward:
            raise RuntimeError("the MXFP8 backward needs the weights' dgrad orientations; this forward ran "
                               "without gradients enabled")


# ======================================================================================================
# The same arithmetic in PyTorch (tests compare the pipeline against it)
# ======================================================================================================
def mxfp8_moe_torch(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate: torch.Tensor,
                    w_up: torch.Tensor, w_down: torch.Tensor, grad_out: torch.Tensor) -> list[torch.Tensor]:
    """The MXFP8 layer and its backward spelled out in PyTorch, expert by expert: every quantization and
    rounding point of the module docstring, products of the dequantized operands in fp64.

    Args: as :func:`mok.moe` (bf16 ``x [T, H]`` and weights, fp32 ``topk_weights [T, K]``) and the output
    gradient ``grad_out`` ``[T, H]``. Returns ``[out, dx, d_topk_weights, d_w_gate, d_w_up, d_w_down]`` in the
    pipeline's dtypes (bf16, bf16, fp32, bf16 x 3). The pipeline differs from it only by its fp32 summation
    order (which can flip a rare rounding downstream).
    """
    from ..mxfp8 import dequantize_torch, quantize_torch
    from ..swiglu import swiglu_backward, swiglu_forward

    bf16 = torch.bfloat16
    tokens, hidden = x.shape
    experts, inter, _ = w_gate.shape
    top_k = topk_ids.shape[1]

    def values(q: MXFP8Tensor) -> torch.Tensor:
        return dequantize_torch(q, torch.float32).double()

    def quantized(t: torch.Tensor) -> torch.Tensor:  # along the last dim (rows)
        return values(quantize_torch(t))

    qw = MXFP8Weights.quantize(w_gate, w_up, w_down, cache=False, backend="torch")
    x_q, grad_q = quantized(x), quantized(grad_out)             # on the source rank, along H
    slots_expert = topk_ids.reshape(-1).long()
    slot_weight = topk_weights.reshape(-1).float()
    y = torch.zeros(tokens * top_k, hidden, dtype=bf16, device=x.device)
    dx_slots = torch.zeros_like(y)
    d_weights = torch.zeros(tokens * top_k, dtype=torch.float32, device=x.device)
    d_w_gate_up = torch.zeros(experts, 2 * inter, hidden, dtype=bf16, device=x.device)
    d_w_down = torch.zeros(experts, hidden, inter, dtype=bf16, device=x.device)
    for e in range(experts):
        slots = (slots_expert == e).nonzero().reshape(-1)
        if slots.numel() == 0:
            continue
        tok = slots // top_k
        w = qw.experts(e, e + 1)
        w_gu, w_dn = values(w.gate_up_fwd)[0], values(w.down_fwd)[0]             # [2I, H], [H, I]
        w_dn_t, w_gu_t = values(w.down_dgrad)[0], values(w.gate_up_dgrad)[0]     # [I, H], [H, 2I]
        # forward: gate/up (bf16), h (bf16, then quantized along I), y (bf16)
        gate_up = (x_q[tok] @ w_gu.T).to(bf16)
        gate, up = gate_up[:, :inter], gate_up[:, inter:]
        y[slots] = (quantized(swiglu_forward(gate, up).to(bf16)) @ w_dn.T).to(bf16)
        # backward: g from dO (along H) and W_down (along H); SwiGLU backward; dx from [dg|du] (along 2I)
        g = (grad_q[tok] @ w_dn_t.T).float()
        d_gate, d_up, dw, _, h_weighted = swiglu_backward(gate, up, g, slot_weight[slots])
        d_gu = torch.cat([d_gate, d_up], dim=1).to(bf16)
        dx_slots[slots] = (quantized(d_gu) @ w_gu_t.T).to(bf16)
        d_weights[slots] = dw
        # weight gradients: bf16 operands (dequantized x and dO), fp32-or-better accumulation
        d_w_gate_up[e] = (d_gu.double().T @ x_q[tok]).to(bf16)
        d_w_down[e] = (grad_q[tok].T @ h_weighted.to(bf16).double()).to(bf16)
    out = (slot_weight.double()[:, None] * y.double()).view(tokens, top_k, hidden).sum(1).to(bf16)
    dx = dx_slots.double().view(tokens, top_k, hidden).sum(1).to(bf16)
    return [out, dx, d_weights.view(tokens, top_k), d_w_gate_up[:, :inter], d_w_gate_up[:, inter:], d_w_down]
