"""Push combine (forward) and push reverse-dispatch (backward), and the fixed-order sums over k.

Reads / writes
    * :func:`push_tile_to_slots` (a device function, the epilogue of the expert GEMMs): writes an output tile's
      rows into the source rank's per-(token, k) slot buffer, ``slots[src_rank[r]][src_slot[r]] = row r``,
      through the buffer's ``ptr_table``. Forward: expert outputs ``y`` into the combine slots; backward:
      ``dx`` rows into the dx slots. Padding rows are skipped. Every (token, k) slot has exactly one writer
      across all ranks, so no atomics are needed and the order of pushes cannot matter.
    * :func:`push_rows` (a kernel): the same for a rows buffer already in memory (``mok.transfers.push_rows``).
    * :func:`push_router_grad`: ``dw[r] = sum_p partial[r, p]`` (the per-column-block partial dots of the fused
      SwiGLU backward, summed in ascending p) pushed into the source's fp32 dw slot.
    * :func:`weighted_sum_over_k` / :func:`sum_over_k`: on the source rank, ``out[t] = sum_k w[t,k] *
      slots[t*top_k + k]`` (or the plain sum, for dx) in fp32 with k ascending, rounded once to the output dtype.

Tiling
    All of these move memory. The sums run a program per (BLOCK_T tokens, BLOCK_H columns) and loop over k
    inside the program, so each token's additions happen in one thread in one fixed order: the result does not
    depend on how many ranks or minibatches produced the slots.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ..comm import PeerBuffer
from ..schedule import RankTables
from ._common import (INTERPRETING, cdiv, check_device, column_halves, next_power_of_2, peer_aligned, peer_base,
                      round_to, rows_of, tl_dtype)


# ========================================================================================================
# The push epilogue
# ========================================================================================================
def sources_from(table: RankTables, start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The table's ``src_rank`` and ``src_slot`` from row ``start`` on (:func:`rows_of`: the tensors themselves
    from row 0, the usual single window)."""
    return rows_of(table.src_rank, slice(start, None)), rows_of(table.src_slot, slice(start, None))


@dataclass(frozen=True)
class SlotPush:
    """Where a kernel's output rows go: rows ``[0, n)`` of a window pushed into per-(token, k) slots.

    Attributes:
        src_rank, src_slot: int32 views of the schedule table starting at the window's first row.
        slots: the destination :class:`PeerBuffer`, ``[T_local * top_k, width]`` on every rank.
    """

    src_rank: torch.Tensor
    src_slot: torch.Tensor
    slots: PeerBuffer

    @classmethod
    def window(cls, table: RankTables, start: int, slots: PeerBuffer) -> "SlotPush":
        return cls(*sources_from(table, start), slots)

    @property
    def row_stride(self) -> int:
        return self.slots.shape[1] if len(self.slots.shape) > 1 else 1

    @property
    def tl_dtype(self):
        return tl_dtype(self.slots.dtype)

    @property
    def aligned(self) -> bool:
        return peer_aligned(self.slots)


@triton.jit
def push_tile_to_slots(values, rows, cols, row_ok, col_ok, src_rank_ptr, src_slot_ptr, slot_ptr_table,
                       slot_stride, SLOT_DTYPE: tl.constexpr, SLOT_ALIGNED: tl.constexpr):
    """Store ``values`` ([BLOCK_ROWS, BLOCK_COLS]) at ``slots[src_rank[row]][src_slot[row], cols]``.

    ``rows`` index the window (and the table views ``src_rank_ptr``/``src_slot_ptr``); padding rows
    (``src_rank < 0``) and masked rows/columns are not stored. The peer is picked per row at run time.
    """
    src_rank = tl.load(src_rank_ptr + rows, mask=row_ok, other=-1)
    real = row_ok & (src_rank >= 0)
    src_slot = tl.load(src_slot_ptr + rows, mask=real, other=0).to(tl.int64)
    slots_base = peer_base(slot_ptr_table, src_rank, real, SLOT_DTYPE, SLOT_ALIGNED)
    targets = slots_base[:, None] + src_slot[:, None] * slot_stride + cols[None, :]
    tl.store(targets, round_to(values, SLOT_DTYPE), mask=real[:, None] & col_ok[None, :])


@triton.jit
def push_tile_in_halves(values, rows, first_col, width, row_ok, src_rank_ptr, src_slot_ptr, slot_ptr_table,
                        slot_stride, SLOT_DTYPE: tl.constexpr, SLOT_ALIGNED: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """:func:`push_tile_to_slots` of a ``[BLOCK_M, BLOCK_N]`` tile whose columns start at ``first_col``, one
    column half at a time (see :func:`mok.triton_ref._common.column_halves`: it keeps a 128 x 256 push
    epilogue out of local memory)."""
    left, right = column_halves(values, BLOCK_M, BLOCK_N)
    cols = first_col + tl.arange(0, BLOCK_N // 2)
    push_tile_to_slots(left, rows, cols, row_ok, cols < width, src_rank_ptr, src_slot_ptr, slot_ptr_table,
                       slot_stride, SLOT_DTYPE, SLOT_ALIGNED)
    cols += BLOCK_N // 2
    push_tile_to_slots(right, rows, cols, row_ok, cols < width, src_rank_ptr, src_slot_ptr, slot_ptr_table,
                       slot_stride, SLOT_DTYPE, SLOT_ALIGNED)


# ========================================================================================================
# Standalone pushes
# ========================================================================================================
@triton.jit
def _push_rows_kernel(values_ptr, values_stride, src_rank_ptr, src_slot_ptr, slot_ptr_table, slot_stride,
                      n_rows, width, SLOT_DTYPE: tl.constexpr, SLOT_ALIGNED: tl.constexpr,
                      BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    row_ok = rows < n_rows
    col_ok = cols < width
    values = tl.load(values_ptr + rows.to(tl.int64)[:, None] * values_stride + cols[None, :],
                     mask=row_ok[:, None] & col_ok[None, :])
    push_tile_to_slots(values, rows, cols, row_ok, col_ok, src_rank_ptr, src_slot_ptr, slot_ptr_table,
                       slot_stride, SLOT_DTYPE, SLOT_ALIGNED)


def push_rows(table: RankTables, start: int, n_rows: int, values: torch.Tensor, slots: PeerBuffer) -> None:
    """``slots[src_rank[r]][src_slot[r]] = values[r - start]`` for the real rows r of ``[start, start+n_rows)``.

    Args:
        values: ``[>= n_rows, width]`` rows (unit column stride).
        slots: ``[T_local * top_k, width]`` on every rank; padding rows are skipped.
    """
    if n_rows <= 0:
        return
    width = values.shape[1]
    if slots.shape[1:] != (width,) or values.stride(1) != 1:
        raise ValueError(f"push_rows: values {tuple(values.shape)} do not match slots {slots.shape}")
    check_device(values, slots.ptr_table)
    target = SlotPush.window(table, start, slots)
    block_cols = min(next_power_of_2(width), 4096 if INTERPRETING else 1024)
    block_rows = 64 if INTERPRETING else 16
    grid = (cdiv(n_rows, block_rows), cdiv(width, block_cols))
    _push_rows_kernel[grid](values, values.stride(0), target.src_rank, target.src_slot, slots.ptr_table,
                            target.row_stride, n_rows, width, SLOT_DTYPE=target.tl_dtype, SLOT_ALIGNED=target.aligned,
                            BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, num_warps=4)


@triton.jit
def _push_router_grad_kernel(partial_ptr, num_partials, src_rank_ptr, src_slot_ptr, dw_ptr_table, n_rows,
                             BLOCK_ROWS: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    # ---- fixed-order reduction of the partial dots: p = 0, 1, ... --------------------------------------
    dw = tl.zeros((BLOCK_ROWS,), tl.float32)
    for p in range(num_partials):
        dw += tl.load(partial_ptr + rows.to(tl.int64) * num_partials + p, mask=row_ok, other=0.0)
    # ---- push into the source rank's (token, k) slot ---------------------------------------------------
    src_rank = tl.load(src_rank_ptr + rows, mask=row_ok, other=-1)
    real = row_ok & (src_rank >= 0)
    src_slot = tl.load(src_slot_ptr + rows, mask=real, other=0)
    dw_base = peer_base(dw_ptr_table, src_rank, real, tl.float32, False)
    tl.store(dw_base + src_slot, dw, mask=real)


def push_router_grad(table: RankTables, start: int, n_rows: int, partials: torch.Tensor,
                     dw_slots: PeerBuffer) -> None:
    """Backward push reverse-dispatch of the router-weight gradient.

    Args:
        partials: fp32 ``[>= n_rows, P]`` (contiguous): ``partials[j, p]`` = ``<g, h>`` over column block p of
            window row j (from :func:`mok.triton_ref.swiglu.down_dgrad_swiglu_backward`).
        dw_slots: fp32 ``[T_local * top_k]`` on every rank; receives ``sum_p partials[j, p]`` (p ascending).
    """
    if n_rows <= 0:
        return
    if partials.dtype != torch.float32 or not partials.is_contiguous() or dw_slots.dtype != torch.float32:
        raise TypeError("push_router_grad: fp32 contiguous partials and fp32 dw slots expected")
    check_device(partials, dw_slots.ptr_table)
    block_rows = 256 if INTERPRETING else 128
    _push_router_grad_kernel[(cdiv(n_rows, block_rows),)](
        partials, partials.shape[1], *sources_from(table, start), dw_slots.ptr_table, n_rows,
        BLOCK_ROWS=block_rows, num_warps=4)


# ========================================================================================================
# Fixed-order sums over k (on the source rank)
# ========================================================================================================
@triton.jit
def _sum_over_k_kernel(slots_ptr, weights_ptr, out_ptr, tokens, width, top_k,
                       WEIGHTED: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    tok = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    tok_ok = tok < tokens
    mask = tok_ok[:, None] & (cols < width)[None, :]
    tok64 = tok.to(tl.int64)
    # ---- acc = 0; acc += w[t,k] * slot[t,k] for k = 0, 1, ... (fp32) ----------------------------------
    acc = tl.zeros((BLOCK_T, BLOCK_H), tl.float32)
    for k in range(top_k):
        slot = tok64 * top_k + k
        term = tl.load(slots_ptr + slot[:, None] * width + cols[None, :], mask=mask, other=0.0).to(tl.float32)
        if WEIGHTED:
            weight = tl.load(weights_ptr + slot, mask=tok_ok, other=0.0)
            term = weight[:, None] * term
        acc += term
    # ---- one rounding to the output dtype ----------------------------------------------------------------
    tl.store(out_ptr + tok64[:, None] * width + cols[None, :], round_to(acc, out_ptr.dtype.element_ty), mask=mask)


def _launch_sum(slots: torch.Tensor, weights: torch.Tensor | None, out: torch.Tensor, top_k: int) -> torch.Tensor:
    tokens, width = out.shape
    if slots.shape != (tokens * top_k, width) or not slots.is_contiguous() or not out.is_contiguous():
        raise ValueError(f"sum over k: slots {tuple(slots.shape)} must be [T*top_k, H] for out "
                         f"{tuple(out.shape)} (both contiguous)")
    check_device(slots, out)
    if tokens == 0:
        return out
    block_t = 64 if INTERPRETING else 16
    block_h = min(next_power_of_2(width), 4096 if INTERPRETING else 256)
    grid = (cdiv(tokens, block_t), cdiv(width, block_h))
    _sum_over_k_kernel[grid](slots, weights if weights is not None else slots, out, tokens, width, top_k,
                             WEIGHTED=weights is not None, BLOCK_T=block_t, BLOCK_H=block_h, num_warps=4)
    return out


def weighted_sum_over_k(slots: torch.Tensor, weights: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Forward combine on a source rank: ``out[t] = sum_k weights[t,k] * slots[t*top_k + k]``.

    Args:
        slots: ``[T_local * top_k, H]`` (the rank's combine slots, any float dtype).
        weights: fp32 ``[T_local, top_k]`` (contiguous) router weights.
        out: ``[T_local, H]`` output; fp32 accumulation, k ascending, one rounding to out's dtype.
    """
    if weights.dtype != torch.float32 or not weights.is_contiguous():
        raise TypeError("weighted_sum_over_k: contiguous fp32 weights expected")
    return _launch_sum(slots, weights, out, weights.shape[1])


def sum_over_k(slots: torch.Tensor, top_k: int, out: torch.Tensor) -> torch.Tensor:
    """Backward dx on a source rank: ``out[t] = sum_k slots[t*top_k + k]`` (fp32, k ascending)."""
    return _launch_sum(slots, None, out, top_k)
