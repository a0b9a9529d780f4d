"""Expert-grouped GEMMs over tile-padded schedule segments: forward, dgrad and wgrad.

The rows of a ring window are the schedule table's rows: each local expert's segment is padded to a whole
number of schedule tiles (``MoKConfig.expert_padding`` rows), so every ``BLOCK_M``-row tile belongs to one
expert, named by ``tile_expert`` (``-1`` past the rows in use). Padding rows hold zeros.

Reads / writes
    * :func:`grouped_gemm_forward`: ``out[r] = A[r] @ W[e]^T`` with ``W`` ``[E_local, N, K]`` (the nn.Linear
      layout), e.g. the down projection ``y = h @ W_down[e]^T``.
    * :func:`grouped_gemm_dgrad`: ``out[r] = sum_i A[r, K_i block] @ W_i[e]`` with each ``W_i``
      ``[E_local, K_i, N]``, e.g. ``dx = [d_gate | d_up] @ [W_gate; W_up]``: the two K phases read the two
      weights where they are instead of concatenating them.
    * Either writes ``out`` rows, or (``push=``) pushes each row into its source rank's (token, k) slot
      (:func:`mok.triton_ref.push_combine.push_tile_to_slots`): forward combine / backward reverse dispatch.
    * :func:`grouped_wgrad`: ``dW[e] (+)= G^T A`` over the rows of expert ``e`` in the window.

Tiling and order
    Forward/dgrad: a program per (``BLOCK_M`` row tile, ``BLOCK_N`` column block), grouped
    (:func:`mok.triton_ref._common.grouped_program_order`) so the row tiles of an expert sweep its weight
    blocks together in L2. The K loop walks ``BLOCK_K`` steps in order with one fp32 accumulator chain, no
    split-K: a row's result depends only on that row and W, never on its neighbours, the window or the rank.
    Programs of tiles past the rows in use exit at once, so grids cover the whole window and no host
    synchronisation is needed. Hopper bf16 (tuned on the H200, see ``_common._GPU_BF16``): ``BLOCK_K`` 64,
    8 warps (two warpgroups), 3 stages, TMA operand loads; 128 x 128 tiles for the down projection and
    128 x 256 for dx (128 x 128 where its reduction, 2I, is at most 2048 deep); the push epilogue stores one
    column half at a time (:func:`mok.triton_ref._common.column_halves`).

    Wgrad: a program per (expert, ``BLOCK_M`` x ``BLOCK_N`` block of dW). It walks the expert's tiles in the
    window in **descending** tile order (``BLOCK_K`` rows per MMA step, ascending inside a tile), chaining
    ``acc = acc + G_step^T A_step`` from the running fp32 dW. The backward visits ring minibatches in reverse,
    so across minibatches the chain continues in the same global order, through an fp32 buffer between
    launches (an exact round trip). Every expert's chain is therefore the same sequence of operations for any
    ring size or EP degree (segments list the same rows in the same order for any EP degree), without
    split-K or atomics. Hopper bf16: 128 x 128 blocks of dW, 64 rows per step, 8 warps, 3 stages, TMA. Both
    operands are row-major in memory and the MMA wants G^T: G is loaded as ``[P, R]`` straight from its rows
    (consecutive P are consecutive addresses, so the loads coalesce) and wgmma reads the tile MN-major from
    shared memory; nothing is transposed in registers. The dW tile leaves by one TMA store.

    Wgrad with few rows per expert (expert parallelism over many experts: 64-128 rows each at two GPUs): a block
    is then two MMA steps and a store, and a program per block spends its time starting, waiting and storing. The
    strip kernel (``_grouped_wgrad_strip_kernel``, its own configuration ``wgrad_few_rows``) runs a program per
    row of blocks instead: the expert's G steps are loaded once, and the blocks' A loads, MMAs and TMA stores
    overlap in one loop that the compiler pipelines. Same rows, same steps, same bits.

Operand loads
    With ``TileConfig.tma`` (:mod:`mok.triton_ref._common`) the operand tiles travel by Hopper's tensor
    memory accelerator from host-built tensor descriptors: one instruction per tile instead of per-thread
    address arithmetic (fewer registers, no address math in the main loop). The descriptors' bounds replace
    the masks (out-of-bounds elements read as zero), so a descriptor names exactly what the pointer path reads:
    the window's rows, one K phase of A, one expert of W (a 3-D ``[E_local, ., .]`` descriptor, so a block
    never spills into the next expert). It changes how tiles reach shared memory, not the products or their
    order. Operands that TMA cannot address (a base or row stride not a multiple of 16 bytes) fall back to
    pointer loads.
"""

from __future__ import annotations

from typing import Sequence

import torch
import triton
import triton.language as tl

from ._common import (TensorDescriptor, TileConfig, cdiv, check_device, gemm_config, grouped_program_order, mma,
                      round_to, tl_dtype, tma_capable, tma_descriptor, tma_weight_block, wgrad_config)
from .push_combine import SlotPush, push_tile_in_halves


# ========================================================================================================
# Forward / dgrad kernel
# ========================================================================================================
@triton.jit
def _grouped_gemm_kernel(
    a_ptr, stride_am,                        # A: [n_rows, K1 + K2] (unit column stride)
    w1_ptr, w2_ptr,                          # W_1, W_2: [E_local, ...]; W_i[e][k, n] at e*swe + k*swk + n*swn
    stride_we, stride_wk, stride_wn,
    a1_desc, a2_desc, w1_desc, w2_desc,      # USE_TMA: descriptors of A[:, :K1], A[:, K1:], W_1, W_2
    tile_expert_ptr,                         # int32 [n_rows // TILE_ROWS]: local expert per tile, -1 = unused
    out_ptr, stride_om,                      # store epilogue: [n_rows, N]
    src_rank_ptr, src_slot_ptr, slot_ptr_table, slot_stride,   # push epilogue
    n_rows, N, K1, K2,
    TILE_ROWS: tl.constexpr, PUSH: tl.constexpr, OUT_DTYPE: tl.constexpr, SLOTS_ALIGNED: tl.constexpr,
    USE_TMA: tl.constexpr, W_K_MAJOR: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # ---- which tile, which expert --------------------------------------------------------------------
    pid_m, pid_n = grouped_program_order(tl.program_id(0), tl.cdiv(n_rows, BLOCK_M), tl.cdiv(N, BLOCK_N), GROUP_M)
    expert = tl.load(tile_expert_ptr + (pid_m * BLOCK_M) // TILE_ROWS)
    if expert < 0:
        return  # past the rows in use

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok = rows < n_rows
    col_ok = cols < N
    a_rows = a_ptr + rows.to(tl.int64)[:, None] * stride_am
    expert_offset = expert.to(tl.int64) * stride_we

    # ---- main loop, phase 1: A[:, 0:K1] @ W_1[e] ---------------------------------------------------------
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    w1 = w1_ptr + expert_offset + cols[None, :] * stride_wn
    for k in range(0, K1, BLOCK_K):
        if USE_TMA:
            a = a1_desc.load([pid_m * BLOCK_M, k])
            w = tma_weight_block(w1_desc, expert, k, pid_n * BLOCK_N, W_K_MAJOR, BLOCK_K, BLOCK_N)
        else:
            k_ok = (k + ks) < K1
            a = tl.load(a_rows + (k + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w1 + (k + ks)[:, None] * stride_wk, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = mma(a, w, acc)

    # ---- main loop, phase 2: A[:, K1:K1+K2] @ W_2[e] (same chain; empty when K2 == 0) -----------------
    w2 = w2_ptr + expert_offset + cols[None, :] * stride_wn
    for k in range(0, K2, BLOCK_K):
        if USE_TMA:
            a = a2_desc.load([pid_m * BLOCK_M, k])
            w = tma_weight_block(w2_desc, expert, k, pid_n * BLOCK_N, W_K_MAJOR, BLOCK_K, BLOCK_N)
        else:
            k_ok = (k + ks) < K2
            a = tl.load(a_rows + (K1 + k + ks)[None, :], mask=row_ok[:, None] & k_ok[None, :], other=0.0)
            w = tl.load(w2 + (k + ks)[:, None] * stride_wk, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = mma(a, w, acc)

    # ---- epilogue: one rounding to the output dtype, stored locally or pushed to the source rank ------
    if PUSH:
        push_tile_in_halves(acc, rows, pid_n * BLOCK_N, N, row_ok, src_rank_ptr, src_slot_ptr, slot_ptr_table,
                            slot_stride, OUT_DTYPE, SLOTS_ALIGNED, BLOCK_M, BLOCK_N)
    else:
        out = out_ptr + rows.to(tl.int64)[:, None] * stride_om + cols[None, :]
        tl.store(out, round_to(acc, OUT_DTYPE), mask=row_ok[:, None] & col_ok[None, :])


def _check_window(a: torch.Tensor, n_rows: int, tile_expert: torch.Tensor, tile_rows: int) -> None:
    if n_rows % tile_rows:
        raise ValueError(f"a window holds whole schedule tiles: {n_rows} rows is not a multiple of {tile_rows}")
    if a.shape[0] < n_rows or a.stride(-1) != 1:
        raise ValueError(f"A must have >= {n_rows} rows and unit column stride, got {tuple(a.shape)}")
    if tile_expert.numel() < n_rows // tile_rows or tile_expert.dtype != torch.int32:
        raise ValueError("tile_expert must be int32 with one entry per schedule tile of the window")


# ========================================================================================================
# TMA descriptors
# ========================================================================================================
# The fields of the TMA descriptors made so far (None: TMA cannot address the tensor), by what they are a pure
# function of: address, shape, strides, dtype, device and block. A descriptor seen before is rebuilt from its
# fields, without checking (tma_capable) and validating (TensorDescriptor's constructor) it again: about 4 us of
# host time per descriptor on the CPU, ten descriptors per layer backward. Only integers are kept, never a
# tensor, so nothing stays alive and a CUDA graph capture may take it like any call. Bounded: cleared when full.
_TMA_FIELDS: dict[tuple, dict | None] = {}
_TMA_FIELDS_MAX = 1024


def _descriptors(*specs) -> tuple | None:
    """A :func:`tma_descriptor` per ``(tensor, shape, block)``, or None unless TMA can address every tensor
    (:func:`tma_capable`): the same answers as checking them all, then making each, but from the fields kept."""
    keyed = [((t.data_ptr(), tuple(shape), t.stride(), t.dtype, t.device, tuple(block)), t, shape, block)
             for t, shape, block in specs]
    for key, t, _, _ in keyed:
        fields = _TMA_FIELDS.get(key, _UNSEEN)
        if fields is _UNSEEN and not tma_capable(t):
            _keep(key, None)
            return None
        if fields is None:
            return None
    return tuple(_descriptor(*entry) for entry in keyed)


def _descriptor(key: tuple, t: torch.Tensor, shape, block):
    fields = _TMA_FIELDS.get(key)
    if fields is None:  # first seen: made (and validated) by Triton's constructor, as always
        desc = tma_descriptor(t, shape, block)
        # Lists kept as tuples and handed out as new lists: no descriptor shares (or can change) the kept ones.
        _keep(key, {name: tuple(value) if isinstance(value, list) else value
                    for name, value in vars(desc).items() if name != "base"})
        return desc
    desc = TensorDescriptor.__new__(TensorDescriptor)
    vars(desc).update({name: list(value) if isinstance(value, tuple) else value for name, value in fields.items()},
                      base=t)
    return desc


def _keep(key: tuple, fields: dict | None) -> None:
    if len(_TMA_FIELDS) >= _TMA_FIELDS_MAX:
        _TMA_FIELDS.clear()
    _TMA_FIELDS[key] = fields


_UNSEEN = object()


def _gemm_descriptors(cfg: TileConfig, a: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor, n_rows: int,
                      k1: int, k2: int, w_k_major: bool):
    """The four TMA descriptors of a forward/dgrad launch, or None where TMA is off or cannot be used (an empty
    window too: a descriptor cannot have a zero extent)."""
    if not cfg.tma or n_rows == 0:
        return None
    a_block = (cfg.block_m, cfg.block_k)
    w_block = (1, cfg.block_n, cfg.block_k) if w_k_major else (1, cfg.block_k, cfg.block_n)
    a_specs = [(a, (n_rows, k1), a_block), (a[:, k1:], (n_rows, k2), a_block)] if k2 else [(a, (n_rows, k1), a_block)]
    descriptors = _descriptors(*a_specs, (w1, w1.shape, w_block), (w2, w2.shape, w_block))
    if descriptors is None or k2:
        return descriptors
    return descriptors[:1] + descriptors  # A's second phase is empty: its descriptor is A's (never read)


def _launch(kernel_name: str, a, w1, w2, strides, n_rows: int, n: int, k1: int, k2: int, tile_expert,
            tile_rows: int, out, push: SlotPush | None, out_dtype: torch.dtype, w_k_major: bool) -> None:
    cfg = gemm_config(kernel_name, a.dtype, tile_rows, n, k1 + k2)
    grid = (cdiv(n_rows, cfg.block_m) * cdiv(n, cfg.block_n),)
    if push is not None:
        check_device(push.slots.ptr_table)
        push_args = (push.src_rank, push.src_slot, push.slots.ptr_table, push.row_stride)
        out_args = (a, 0)  # unused
    else:
        push_args = (tile_expert, tile_expert, tile_expert, 0)  # unused
        out_args = (out, out.stride(0))
    descriptors = _gemm_descriptors(cfg, a, w1, w2, n_rows, k1, k2, w_k_major)
    _grouped_gemm_kernel[grid](
        a, a.stride(0), w1, w2, *strides, *(descriptors or (a, a, w1, w2)), tile_expert, *out_args, *push_args,
        n_rows, n, k1, k2,
        TILE_ROWS=tile_rows, PUSH=push is not None, OUT_DTYPE=tl_dtype(out_dtype),
        SLOTS_ALIGNED=push is not None and push.aligned, USE_TMA=descriptors is not None, W_K_MAJOR=w_k_major,
        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, GROUP_M=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _output(out: torch.Tensor | None, push: SlotPush | None, a: torch.Tensor, n_rows: int, n: int):
    if (out is None) == (push is None):
        raise ValueError("give exactly one of out= (store rows) and push= (push rows to the source slots)")
    if push is not None:
        if push.slots.shape[1:] != (n,):
            raise ValueError(f"push target slots {push.slots.shape} do not have {n} columns")
        return push.slots.dtype
    if out.shape[0] < n_rows or out.shape[1] != n or out.stride(1) != 1:
        raise ValueError(f"out must be [>= {n_rows}, {n}] with unit column stride, got {tuple(out.shape)}")
    return out.dtype


def grouped_gemm_forward(a: torch.Tensor, w: torch.Tensor, tile_expert: torch.Tensor, tile_rows: int, *,
                         n_rows: int | None = None, out: torch.Tensor | None = None,
                         push: SlotPush | None = None) -> None:
    """``row r -> A[r] @ W[e(r)]^T`` over a window of schedule rows.

    Args:
        a: ``[>= n_rows, K]`` window rows (bf16 or fp32), unit column stride.
        w: ``[E_local, N, K]`` the rank's local experts' weights (a's dtype), contiguous.
        tile_expert: int32 ``[n_rows // tile_rows]`` local expert of each schedule tile, -1 for unused tiles.
        tile_rows: the schedule tile (``MoKConfig.expert_padding``).
        n_rows: window rows (default ``a.shape[0]``), a multiple of ``tile_rows``.
        out: ``[>= n_rows, N]`` rows to store (a's dtype or another float dtype), or
        push: push row r into its source slot instead (the forward combine).
    Unused tiles are not written.
    """
    n_rows = a.shape[0] if n_rows is None else n_rows
    _check_window(a, n_rows, tile_expert, tile_rows)
    if w.dim() != 3 or w.shape[2] != a.shape[1] or not w.is_contiguous() or w.dtype != a.dtype:
        raise ValueError(f"w must be contiguous [E_local, N, K={a.shape[1]}] of a's dtype, got {tuple(w.shape)}")
    check_device(a, w, tile_expert)
    n, k = w.shape[1], w.shape[2]
    out_dtype = _output(out, push, a, n_rows, n)
    # W[e][k, n] at e*N*K + n*K + k
    _launch("down_forward", a, w, w, (w.stride(0), w.stride(2), w.stride(1)), n_rows, n, k, 0, tile_expert,
            tile_rows, out, push, out_dtype, w_k_major=True)


def grouped_gemm_dgrad(a: torch.Tensor, ws: Sequence[torch.Tensor], tile_expert: torch.Tensor, tile_rows: int, *,
                       n_rows: int | None = None, out: torch.Tensor | None = None,
                       push: SlotPush | None = None) -> None:
    """``row r -> sum_i A[r, K_i block] @ W_i[e(r)]`` over a window of schedule rows (one fp32 chain, i ascending).

    Args:
        a: ``[>= n_rows, sum K_i]`` window rows, unit column stride.
        ws: one or two ``[E_local, K_i, N]`` contiguous weights of one shape (e.g. ``(w_gate, w_up)`` local slices).
        Others as :func:`grouped_gemm_forward`.
    """
    n_rows = a.shape[0] if n_rows is None else n_rows
    _check_window(a, n_rows, tile_expert, tile_rows)
    if not 1 <= len(ws) <= 2 or any(w.shape != ws[0].shape or not w.is_contiguous() or w.dtype != a.dtype
                                    for w in ws):
        raise ValueError("ws: one or two contiguous weights of one shape and a's dtype")
    w1 = ws[0]
    w2 = ws[-1]
    k_each, n = w1.shape[1], w1.shape[2]
    if a.shape[1] != k_each * len(ws):
        raise ValueError(f"A has {a.shape[1]} columns; the weights need {k_each * len(ws)}")
    check_device(a, w1, w2, tile_expert)
    out_dtype = _output(out, push, a, n_rows, n)
    # W_i[e][k, n] at e*K*N + k*N + n
    _launch("dx_dgrad", a, w1, w2, (w1.stride(0), w1.stride(1), w1.stride(2)), n_rows, n, k_each,
            k_each if len(ws) == 2 else 0, tile_expert, tile_rows, out, push, out_dtype, w_k_major=False)


# ========================================================================================================
# Wgrad kernel
# ========================================================================================================
@triton.jit
def _step_row(end_row, step, STEPS_PER_TILE: tl.constexpr, TILE_ROWS: tl.constexpr, BLOCK_R: tl.constexpr):
    """The first window row of an expert's MMA step ``step``, for an expert whose rows end at window row
    ``end_row``: tiles in **descending** order, ``BLOCK_R`` rows per step ascending inside a tile. Every wgrad
    kernel walks an expert's rows in this one order, so their sums, and bits, are the same."""
    return end_row - (step // STEPS_PER_TILE + 1) * TILE_ROWS + (step % STEPS_PER_TILE) * BLOCK_R


@triton.jit(do_not_specialize=["load_chain", "store_final"])  # one binary for every window of a chain
def _grouped_wgrad_kernel(
    g_ptr, stride_g,                 # G: [n_rows, P] window rows (unit column stride)
    a_ptr, stride_a,                 # A: [n_rows, Q] window rows (unit column stride)
    g_desc, a_desc,                  # USE_TMA: descriptors of G and A ([BLOCK_R, BLOCK_P] / [BLOCK_R, BLOCK_Q])
    out_ptr, stride_oe, stride_op,   # dW: [E_local, P, Q] in the weight dtype (written when store_final)
    out_desc,                        # TMA_STORE: descriptor of dW, [1, BLOCK_P, BLOCK_Q] blocks
    chain_ptr,                       # fp32 [E_local, P, Q] contiguous: the running sum between windows
    segment_offsets_ptr,             # int32 [E_local + 1]: the rank's padded segments (table rows)
    window_start, window_end,        # the window's table rows
    load_chain, store_final,         # runtime flags: continue a chain / finish it
    P, Q,
    TILE_ROWS: tl.constexpr, OUT_DTYPE: tl.constexpr, USE_TMA: tl.constexpr, TMA_STORE: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_R: tl.constexpr, GROUP_P: tl.constexpr,
):
    # ---- which expert, which dW block, which tiles ---------------------------------------------------
    expert = tl.program_id(1)
    pid_p, pid_q = grouped_program_order(tl.program_id(0), tl.cdiv(P, BLOCK_P), tl.cdiv(Q, BLOCK_Q), GROUP_P)
    first = tl.maximum(tl.load(segment_offsets_ptr + expert), window_start)
    last = tl.minimum(tl.load(segment_offsets_ptr + expert + 1), window_end)
    steps = tl.maximum(last - first, 0) // BLOCK_R
    if (steps == 0) & (load_chain != 0) & (store_final == 0):
        return  # nothing of this expert here, and its running sum stays where it is

    ps = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    qs = pid_q * BLOCK_Q + tl.arange(0, BLOCK_Q)
    p_ok = ps < P
    q_ok = qs < Q
    pq_mask = p_ok[:, None] & q_ok[None, :]
    # NOTE: one expert's dW has fewer than 2^31 elements (checked on the host): a 64-bit base per program and
    # 32-bit offsets per element keep the epilogue's addresses out of the register budget of the main loop.
    chain_base = chain_ptr + expert.to(tl.int64) * P * Q
    block = ps[:, None] * Q + qs[None, :]

    # ---- start the chain: zeros, or the fp32 running sum of the windows already visited --------------
    acc = tl.zeros((BLOCK_P, BLOCK_Q), tl.float32)
    if load_chain != 0:
        # NOTE: .to() keeps one type on both branches: when no chain buffer exists, chain_ptr aliases `out`
        # (a bf16 pointer) and this branch is compiled, though never taken.
        acc = tl.load(chain_base + block, mask=pq_mask, other=0.0).to(tl.float32)

    # ---- tiles in descending order, BLOCK_R rows per step (ascending inside a tile) --------------------
    rs = tl.arange(0, BLOCK_R)
    for step in range(steps):
        first_row = _step_row(last - window_start, step, TILE_ROWS // BLOCK_R, TILE_ROWS, BLOCK_R)
        if USE_TMA:
            g_t = tl.trans(g_desc.load([first_row, pid_p * BLOCK_P]))    # [P, R]: a transposed view in smem
            a = a_desc.load([first_row, pid_q * BLOCK_Q])                # [R, Q]
        else:
            rows = (first_row + rs).to(tl.int64)
            g_t = tl.load(g_ptr + rows[None, :] * stride_g + ps[:, None], mask=p_ok[:, None], other=0.0)  # [P, R]
            a = tl.load(a_ptr + rows[:, None] * stride_a + qs[None, :], mask=q_ok[None, :], other=0.0)    # [R, Q]
        acc = mma(g_t, a, acc)

    # ---- finish: the weight dtype, or keep the fp32 running sum for the next window -------------------
    if store_final != 0:
        if TMA_STORE:
            # One bulk store of the tile; the descriptor's bounds are this expert's [P, Q], so the edge blocks
            # are clipped there, as the mask does below.
            out_desc.store([expert, pid_p * BLOCK_P, pid_q * BLOCK_Q],
                           tl.reshape(round_to(acc, OUT_DTYPE), (1, BLOCK_P, BLOCK_Q)))
        else:
            out = out_ptr + expert.to(tl.int64) * stride_oe + (ps[:, None] * stride_op + qs[None, :])
            tl.store(out, round_to(acc, OUT_DTYPE), mask=pq_mask)
    else:
        tl.store(chain_base + block, acc, mask=pq_mask)


@triton.jit
def _strip_with_g_held(g_desc, a_desc, out_desc, expert, p0, end_row, first_block, end_block,
                       STEPS: tl.constexpr, STEPS_PER_TILE: tl.constexpr, TILE_ROWS: tl.constexpr,
                       OUT_DTYPE: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_R: tl.constexpr):
    """The blocks ``[first_block, end_block)`` of an expert whose rows are exactly ``STEPS`` MMA steps (one or two
    tiles, at most four steps) ending at window row ``end_row``: its G steps loaded once (in :func:`_step_row`'s
    order), then one pipelined loop over the blocks."""
    row0 = _step_row(end_row, 0, STEPS_PER_TILE, TILE_ROWS, BLOCK_R)
    g0 = tl.trans(g_desc.load([row0, p0]))                      # [P, R]: a transposed view in shared memory
    if STEPS > 1:
        row1 = _step_row(end_row, 1, STEPS_PER_TILE, TILE_ROWS, BLOCK_R)
        g1 = tl.trans(g_desc.load([row1, p0]))
    if STEPS > 2:
        row2 = _step_row(end_row, 2, STEPS_PER_TILE, TILE_ROWS, BLOCK_R)
        g2 = tl.trans(g_desc.load([row2, p0]))
    if STEPS > 3:
        row3 = _step_row(end_row, 3, STEPS_PER_TILE, TILE_ROWS, BLOCK_R)
        g3 = tl.trans(g_desc.load([row3, p0]))
    for block in range(first_block, end_block):
        q0 = block * BLOCK_Q
        acc = mma(g0, a_desc.load([row0, q0]), tl.zeros((BLOCK_P, BLOCK_Q), tl.float32))
        if STEPS > 1:
            acc = mma(g1, a_desc.load([row1, q0]), acc)
        if STEPS > 2:
            acc = mma(g2, a_desc.load([row2, q0]), acc)
        if STEPS > 3:
            acc = mma(g3, a_desc.load([row3, q0]), acc)
        out_desc.store([expert, p0, q0], tl.reshape(round_to(acc, OUT_DTYPE), (1, BLOCK_P, BLOCK_Q)))


@triton.jit
def _grouped_wgrad_strip_kernel(
    g_desc, a_desc,                  # descriptors of G and A ([BLOCK_R, BLOCK_P] / [BLOCK_R, BLOCK_Q] blocks)
    out_desc,                        # descriptor of dW [E_local, P, Q], [1, BLOCK_P, BLOCK_Q] blocks
    segment_offsets_ptr,             # int32 [E_local + 1]: the rank's padded segments (table rows)
    window_start, window_end,        # the window's table rows (one window: no chain)
    P, Q,
    TILE_ROWS: tl.constexpr, OUT_DTYPE: tl.constexpr, TWO_TILES: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_Q: tl.constexpr, BLOCK_R: tl.constexpr, STRIP: tl.constexpr,
):
    """The weight gradient where experts have few rows: a program per (expert, ``BLOCK_P`` rows of dW, ``STRIP``
    consecutive ``BLOCK_Q``-wide blocks). With about one tile of rows per expert, a block is two MMA steps and
    a 32 KB store, and a program per block spends its time starting, waiting for its loads and storing: the
    stores bound the kernel (round 27: dW written at 1.9 TB/s). Here an expert with exactly one tile (or, with
    ``TWO_TILES``, two) loads its G steps once, and the strip's blocks run as one loop that the compiler
    pipelines: the next blocks' A tiles load, and the last block's TMA store drains, while this block
    multiplies. The arithmetic per block is the general kernel's (the same steps in the same order), so the bits
    are the same."""
    expert = tl.program_id(1)
    n_strips = tl.cdiv(tl.cdiv(Q, BLOCK_Q), STRIP)
    pid_p = tl.program_id(0) // n_strips
    first_block = (tl.program_id(0) % n_strips) * STRIP
    end_block = tl.minimum(first_block + STRIP, tl.cdiv(Q, BLOCK_Q))
    first = tl.maximum(tl.load(segment_offsets_ptr + expert), window_start)
    last = tl.minimum(tl.load(segment_offsets_ptr + expert + 1), window_end)
    steps = tl.maximum(last - first, 0) // BLOCK_R
    STEPS_PER_TILE: tl.constexpr = TILE_ROWS // BLOCK_R
    tl.static_assert(STEPS_PER_TILE <= 2, "the strip kernel holds at most two G steps per tile")
    p0 = pid_p * BLOCK_P
    end_row = last - window_start

    if steps == STEPS_PER_TILE:
        _strip_with_g_held(g_desc, a_desc, out_desc, expert, p0, end_row, first_block, end_block, STEPS_PER_TILE,
                           STEPS_PER_TILE, TILE_ROWS, OUT_DTYPE, BLOCK_P, BLOCK_Q, BLOCK_R)
    elif TWO_TILES and steps == 2 * STEPS_PER_TILE:
        _strip_with_g_held(g_desc, a_desc, out_desc, expert, p0, end_row, first_block, end_block, 2 * STEPS_PER_TILE,
                           STEPS_PER_TILE, TILE_ROWS, OUT_DTYPE, BLOCK_P, BLOCK_Q, BLOCK_R)
    else:
        # ---- no rows (zeros stored) or more tiles: the general kernel's order, one block at a time -------
        for block in range(first_block, end_block):
            acc = tl.zeros((BLOCK_P, BLOCK_Q), tl.float32)
            for step in range(steps):
                first_row = _step_row(end_row, step, STEPS_PER_TILE, TILE_ROWS, BLOCK_R)
                acc = mma(tl.trans(g_desc.load([first_row, p0])), a_desc.load([first_row, block * BLOCK_Q]), acc)
            out_desc.store([expert, p0, block * BLOCK_Q], tl.reshape(round_to(acc, OUT_DTYPE), (1, BLOCK_P, BLOCK_Q)))


def few_rows_per_expert(routed_rows: int, local_experts: int, tile_rows: int) -> bool:
    """Whether experts sharing ``routed_rows`` evenly hold at most one and a half tiles each, so that nearly all
    of them fill one or two (padded) tiles: where the strip kernel's loops with G held apply."""
    return 2 * routed_rows <= 3 * local_experts * tile_rows


def _two_tiles_expected(routed_rows: int, local_experts: int, tile_rows: int) -> bool:
    """Whether many experts will hold two tiles (more than three quarters of a tile each on average): then the
    strip kernel compiles its two-tile loop too (more shared memory, so not where one tile is the rule)."""
    return 4 * routed_rows > 3 * local_experts * tile_rows


def grouped_wgrad(g: torch.Tensor, a: torch.Tensor, segment_offsets: torch.Tensor, window_start: int,
                  n_rows: int, tile_rows: int, *, out: torch.Tensor, chain: torch.Tensor | None,
                  load_chain: bool, store_final: bool, routed_rows: int | None = None) -> None:
    """``dW[e] (+)= G^T A`` over the rows of each local expert ``e`` inside the window, in the fixed order.

    Args:
        g: ``[>= n_rows, P]`` window rows (a column slice of a wider buffer is fine: unit column stride).
        a: ``[>= n_rows, Q]`` window rows.
        segment_offsets: int32 ``[E_local + 1]`` the rank's padded segment starts (table rows).
        window_start, n_rows: the window ``[window_start, window_start + n_rows)`` of table rows that rows
            ``[0, n_rows)`` of ``g`` and ``a`` hold.
        tile_rows: the schedule tile.
        out: ``[E_local, P, Q]`` dW in the weight dtype (unit stride on Q); written only when ``store_final``.
        chain: fp32 ``[E_local, P, Q]`` contiguous running sum; needed unless the window is both the first and
            the last one (``load_chain=False, store_final=True``).
        load_chain: continue each expert's chain from ``chain`` (False: start from zero).
        store_final: write ``out`` (else store the running sum to ``chain``).
        routed_rows: how many routed rows (padding excluded) the caller expects in the window, e.g. tokens x
            top-k / EP; None: ``n_rows``. Only a hint: with few rows per expert (:func:`few_rows_per_expert`) a
            single-window launch takes the strip kernel (the ``wgrad_few_rows`` configuration, when its ``strip``
            is set), which gives the same bits.

    Experts with no rows in the window keep their chain untouched (``load_chain and not store_final``),
    store zeros (a first window that is not final) or finish it.
    """
    if g.shape[0] < n_rows or a.shape[0] < n_rows or g.stride(1) != 1 or a.stride(1) != 1:
        raise ValueError("g and a must hold the window's rows with unit column stride")
    local_experts = segment_offsets.numel() - 1
    p, q = g.shape[1], a.shape[1]
    if tuple(out.shape) != (local_experts, p, q) or out.stride(2) != 1:
        raise ValueError(f"out must be [E_local={local_experts}, {p}, {q}] with unit last stride, "
                         f"got {tuple(out.shape)}")
    if (load_chain or not store_final) and (chain is None or tuple(chain.shape) != (local_experts, p, q)
                                            or chain.dtype != torch.float32 or not chain.is_contiguous()):
        raise ValueError("this window continues or leaves a running sum: chain must be fp32 [E_local, P, Q]")
    if g.dtype != a.dtype:
        raise TypeError(f"G ({g.dtype}) and A ({a.dtype}) must share a dtype")
    if p * max(q, out.stride(1)) >= 2**31:
        raise ValueError(f"one expert's dW [{p}, {q}] must have fewer than 2^31 elements (32-bit offsets)")
    check_device(g, a, out, segment_offsets)
    if local_experts == 0:
        return
    cfg = wgrad_config(a.dtype, tile_rows, p, q)
    few = wgrad_config(a.dtype, tile_rows, p, q, "wgrad_few_rows")
    # The strip kernel only with the general kernel's rows per step: an element's sum then runs over the same rows
    # in the same steps (the blocks' widths do not enter it), so the bits do not depend on which kernel ran.
    routed_rows = n_rows if routed_rows is None else routed_rows
    if (few.strip > 0 and few.tma and few.block_k == cfg.block_k and tile_rows // few.block_k <= 2 and store_final
            and not load_chain and n_rows > 0 and few_rows_per_expert(routed_rows, local_experts, tile_rows)):
        descriptors = _descriptors((g, (n_rows, p), (few.block_k, few.block_m)),
                                   (a, (n_rows, q), (few.block_k, few.block_n)),
                                   (out, out.shape, (1, few.block_m, few.block_n)))
        if descriptors is not None:
            strips = cdiv(cdiv(q, few.block_n), few.strip)
            _grouped_wgrad_strip_kernel[(cdiv(p, few.block_m) * strips, local_experts)](
                *descriptors, segment_offsets, window_start, window_start + n_rows, p, q,
                TILE_ROWS=tile_rows, OUT_DTYPE=tl_dtype(out.dtype),
                TWO_TILES=_two_tiles_expected(routed_rows, local_experts, tile_rows),
                BLOCK_P=few.block_m, BLOCK_Q=few.block_n, BLOCK_R=few.block_k, STRIP=few.strip,
                num_warps=few.num_warps, num_stages=few.num_stages)
            return
    grid = (cdiv(p, cfg.block_m) * cdiv(q, cfg.block_n), local_experts)
    descriptors = (_descriptors((g, (n_rows, p), (cfg.block_k, cfg.block_m)),
                                (a, (n_rows, q), (cfg.block_k, cfg.block_n))) if cfg.tma and n_rows > 0 else None)
    use_tma = descriptors is not None
    descriptors = descriptors or (g, a)
    out_desc = (_descriptors((out, out.shape, (1, cfg.block_m, cfg.block_n))) if cfg.tma_store and store_final
                else None)
    _grouped_wgrad_kernel[grid](
        g, g.stride(0), a, a.stride(0), *descriptors, out, out.stride(0), out.stride(1),
        out_desc[0] if out_desc else out,
        chain if chain is not None else out, segment_offsets, window_start, window_start + n_rows,
        int(load_chain), int(store_final), p, q,
        TILE_ROWS=tile_rows, OUT_DTYPE=tl_dtype(out.dtype), USE_TMA=use_tma, TMA_STORE=out_desc is not None,
        BLOCK_P=cfg.block_m, BLOCK_Q=cfg.block_n, BLOCK_R=cfg.block_k, GROUP_P=cfg.group_m,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages)
