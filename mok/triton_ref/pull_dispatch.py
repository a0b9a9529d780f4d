"""Pull dispatch (forward) and pull reverse-combine (backward): the expert side reads the rows its table names.

Reads
    * a window ``[start, start + n_rows)`` of one expert-side rank's schedule table: ``src_rank``, ``src_slot``
      (``src_slot = local_token * top_k + k``; ``-1`` on padding rows);
    * the source ranks' token buffers (``x`` forward, ``dO`` backward; ``[T_local, H]`` on every rank) through
      a :class:`mok.comm.PeerBuffer`'s ``ptr_table``: the peer is picked at run time from ``src_rank``, so the
      same kernel reads emulated ranks in one process now and peer GPUs' mapped memory later;
    * backward only: the source ranks' router weights (``[T_local * top_k]`` fp32), by slot.

Writes
    rows ``[0, n_rows)`` of an expert-side buffer (a ring minibatch, or backward scratch): row ``j`` is the token
    row that table row ``start + j`` names, zeros on padding rows (so padded GEMM rows contribute nothing);
    backward also ``weight_out[j]`` (0 on padding rows).

Two orders, the same bytes in the same places
    * **by row** (``_pull_rows_kernel``): a program copies ``BLOCK_ROWS`` table rows x ``BLOCK_COLS`` columns.
      A token with top-k > 1 is read once for each of its rows on the rank, and those rows lie far apart in the
      table (one per expert segment): once the sources outgrow L2 the rereads come from HBM (anchor-2, top-16:
      a pull reads 4.3 GB to write 4.3 GB).
    * **by token** (``_pull_token_fanout_kernel``): a program reads ``BLOCK_TOKENS`` token rows of one source
      rank *once* and stores each of them into every row of the window that names it, found through the
      window's inverse map, which a first kernel (``_map_window_kernel``) writes from the table; that kernel
      also zeroes the padding rows, which no token names. Reads drop by the rows per token that land on this
      rank (up to top-k), and across GPUs a token crosses the link once per expert-side rank, not once per
      expert. Round 29 on the H200: 1.29-1.50x the by-row pull at anchors 1-3.
    :func:`pull_order` picks one (by token for top-k > 1 where it pays); ``MOK_PULL_ORDER=row|token`` forces it.

Tiling
    Pure data movement. Rows are bf16, fp32 or raw bytes: MXFP8 mode pulls packed rows (E4M3 codes, then the
    row's E8M0 scales; see :mod:`mok.triton_ref.mxfp8_rows`) as uint8, so the same kernels move ``H + H/32``
    bytes per row instead of ``2H``. Each row is one contiguous run on its source rank, so the loads are
    coalesced along columns whichever peer each row comes from; splitting columns gives enough programs to keep
    every SM's memory pipe busy and bounds registers. By row, programs whose rows all lie past the rank's rows
    in use (``segment_offsets[-1]``, read on the device) exit at once, so the grid can cover the whole window
    without a host synchronisation. A peer's base address is loaded from memory, so the kernel is told (after a
    host-side check) that it is 16-byte aligned: that keeps 16-byte vector loads
    (:func:`mok.triton_ref._common.peer_base`).
"""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

from ..comm import PeerBuffer
from ..schedule import RankTables
from ._common import INTERPRETING, cdiv, check_device, next_power_of_2, peer_aligned, peer_base, tl_dtype
from .push_combine import sources_from


def _row_dtype(dtype: torch.dtype):
    """The Triton element type of a row buffer: the float types, or uint8 for packed MXFP8 rows."""
    return tl.uint8 if dtype == torch.uint8 else tl_dtype(dtype)


@triton.jit
def _pull_rows_kernel(
    src_ptr_table,          # int64 [R]: base address of the token buffer ([T_local, width]) on each rank
    src_stride,             # row stride of that buffer (elements; the buffers are contiguous)
    table_src_rank,         # int32 [n_rows]: window of the table (source rank, -1 on padding)
    table_src_slot,         # int32 [n_rows]: window of the table (token * top_k + k, -1 on padding)
    rows_in_use_ptr,        # int32 [1]: rows in use in the whole table (segment_offsets[-1])
    window_start,           # table row of window row 0
    out_ptr, out_stride,    # [n_rows, width] destination
    weight_ptr_table,       # int64 [R]: base address of the fp32 router weights ([T_local * top_k]); PULL_WEIGHT
    weight_out_ptr,         # fp32 [n_rows]; PULL_WEIGHT
    n_rows, width, top_k,
    SRC_DTYPE: tl.constexpr, SRC_ALIGNED: tl.constexpr, PULL_WEIGHT: tl.constexpr,
    BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    first_row = pid_r * BLOCK_ROWS
    if window_start + first_row >= tl.load(rows_in_use_ptr):
        return  # past the rows in use: nothing reads these ring rows

    # ---- which rows, from which peer ------------------------------------------------------------------
    rows = first_row + tl.arange(0, BLOCK_ROWS)
    in_window = rows < n_rows
    src_rank = tl.load(table_src_rank + rows, mask=in_window, other=-1)
    real = src_rank >= 0
    src_slot = tl.load(table_src_slot + rows, mask=real, other=0)
    token = (src_slot // top_k).to(tl.int64)
    src_base = peer_base(src_ptr_table, src_rank, real, SRC_DTYPE, SRC_ALIGNED)

    # ---- copy the row segments (padding rows read nothing and store zeros) --------------------------
    cols = pid_c * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_ok = cols < width
    values = tl.load(src_base[:, None] + token[:, None] * src_stride + cols[None, :],
                     mask=real[:, None] & col_ok[None, :], other=0.0)
    out = out_ptr + rows.to(tl.int64)[:, None] * out_stride + cols[None, :]
    tl.store(out, values.to(out_ptr.dtype.element_ty), mask=in_window[:, None] & col_ok[None, :])

    # ---- backward: the router weight of each row, by slot (once per row: column block 0) --------------
    if PULL_WEIGHT:
        if pid_c == 0:
            weight_base = peer_base(weight_ptr_table, src_rank, real, tl.float32, False)
            weight = tl.load(weight_base + src_slot, mask=real, other=0.0)
            tl.store(weight_out_ptr + rows, weight, mask=in_window)


# ---- the by-token order ----------------------------------------------------------------------------------
@triton.jit
def _map_window_kernel(
    table_src_rank,         # int32 [n_rows]: window of the table (source rank, -1 on padding)
    table_src_slot,         # int32 [n_rows]: window of the table (token * top_k + k, -1 on padding)
    rows_in_use_ptr,        # int32 [1]: rows in use in the whole table (segment_offsets[-1])
    fanout_ptr,             # int32 [R * slots_per_rank]: written here, (source rank, slot) -> window row
    slots_per_rank,
    out_ptr, out_stride, weight_out_ptr,
    window_start, n_rows, width,
    PULL_WEIGHT: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """The by-token pull's first half, one program per ``BLOCK_ROWS`` window rows: each real row enters itself
    in the inverse map, each padding row in use gets its zeros (no token names it, so the second half would
    not)."""
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    in_use = (rows < n_rows) & (window_start + rows < tl.load(rows_in_use_ptr))
    src_rank = tl.load(table_src_rank + rows, mask=in_use, other=-1)
    real = src_rank >= 0
    src_slot = tl.load(table_src_slot + rows, mask=real, other=0)
    tl.store(fanout_ptr + src_rank * slots_per_rank + src_slot, rows, mask=real)

    padding = in_use & ~real
    if tl.max(padding.to(tl.int32), axis=0) == 0:
        return  # most blocks: real rows only
    zeros = tl.zeros((BLOCK_ROWS, BLOCK_COLS), dtype=out_ptr.dtype.element_ty)
    out_rows = out_ptr + rows.to(tl.int64)[:, None] * out_stride
    for c0 in range(0, width, BLOCK_COLS):
        cols = c0 + tl.arange(0, BLOCK_COLS)
        tl.store(out_rows + cols[None, :], zeros, mask=padding[:, None] & (cols < width)[None, :])
    if PULL_WEIGHT:
        tl.store(weight_out_ptr + rows, tl.zeros((BLOCK_ROWS,), dtype=tl.float32), mask=padding)


@triton.jit
def _window_row_of(fanout_ptr, src_rank, tokens, token_ok, k, slots_per_rank, n_rows, TOP_K: tl.constexpr):
    """Where slot (token, k) of ``src_rank`` lies in the window, and whether it does (-1 in the map: not here)."""
    row = tl.load(fanout_ptr + src_rank * slots_per_rank + tokens * TOP_K + k, mask=token_ok, other=-1)
    return row, token_ok & (row >= 0) & (row < n_rows)


@triton.jit
def _pull_token_fanout_kernel(
    src_ptr_table,          # int64 [R]: base address of the token buffer ([T_local, width]) on each rank
    src_stride,             # row stride of that buffer (elements)
    fanout_ptr,             # int32 [R * T_local * TOP_K]: window row of each (source rank, slot), -1 if none
    out_ptr, out_stride,    # [n_rows, width] destination
    weight_ptr_table,       # int64 [R]: base address of the fp32 router weights ([T_local * top_k]); PULL_WEIGHT
    weight_out_ptr,         # fp32 [n_rows]; PULL_WEIGHT
    n_rows, tokens_local, width,
    TOP_K: tl.constexpr,
    SRC_DTYPE: tl.constexpr, SRC_ALIGNED: tl.constexpr, PULL_WEIGHT: tl.constexpr,
    BLOCK_TOKENS: tl.constexpr, BLOCK_COLS: tl.constexpr,
):
    """The by-token pull's second half: a program reads ``BLOCK_TOKENS`` token rows of source rank
    ``program_id(2)`` (``BLOCK_COLS`` columns of them) once, and stores each into every window row it has."""
    pid_t = tl.program_id(0)
    pid_c = tl.program_id(1)
    src_rank = tl.program_id(2)
    slots_per_rank = tokens_local * TOP_K

    # ---- which tokens of this block have a row in the window --------------------------------------------
    tokens = pid_t * BLOCK_TOKENS + tl.arange(0, BLOCK_TOKENS)
    token_ok = tokens < tokens_local
    needed = tl.zeros((BLOCK_TOKENS,), dtype=tl.int1)
    for k in tl.static_range(TOP_K):
        _, lands = _window_row_of(fanout_ptr, src_rank, tokens, token_ok, k, slots_per_rank, n_rows, TOP_K)
        needed = needed | lands

    # ---- read each of them once ---------------------------------------------------------------------------
    cols = pid_c * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    col_ok = cols < width
    src_base = tl.load(src_ptr_table + src_rank).to(tl.pointer_type(SRC_DTYPE))
    if SRC_ALIGNED:
        src_base = tl.multiple_of(src_base, 16)  # see peer_base
    values = tl.load(src_base + tokens.to(tl.int64)[:, None] * src_stride + cols[None, :],
                     mask=needed[:, None] & col_ok[None, :], other=0.0)
    values = values.to(out_ptr.dtype.element_ty)

    # ---- and store it into each of its rows (the map's entries again: L1 hits) -----------------------------
    for k in tl.static_range(TOP_K):
        row, lands = _window_row_of(fanout_ptr, src_rank, tokens, token_ok, k, slots_per_rank, n_rows, TOP_K)
        tl.store(out_ptr + row.to(tl.int64)[:, None] * out_stride + cols[None, :], values,
                 mask=lands[:, None] & col_ok[None, :])
        if PULL_WEIGHT:  # the router weight of the (token, k) slot, once per row: column block 0
            if pid_c == 0:
                weight_base = tl.load(weight_ptr_table + src_rank).to(tl.pointer_type(tl.float32))
                weight = tl.load(weight_base + tokens * TOP_K + k, mask=lands, other=0.0)
                tl.store(weight_out_ptr + row, weight, mask=lands)


# The by-token kernel's tiling (tokens per program, columns per program, warps); experiments/pull_order_bench.py
# sweeps others through this dict. Round 29's call 4: nine tilings span 2-8% per shape; this one is within 2% of
# the best at every shape swept.
TOKEN_PULL_TILING = {"block_tokens": 4, "block_cols": 4096, "num_warps": 8}


def pull_order(top_k: int, src: PeerBuffer) -> str:
    """"row" or "token" for a pull of ``src``'s rows in a layer with ``top_k``: ``MOK_PULL_ORDER`` (read at every
    call, so an A/B script can switch it between calls), or by default ("auto"):

    * top-k 1: by row (a token has one row: nothing to share);
    * sources on other ranks' devices (``src.remote``): by token, which reads each token over the link once per
      rank;
    * local sources: by token where the by-row order's rereads would miss L2. It sweeps the sources one
      1,024-column block at a time, so its rereads hit L2 while a block of all source rows fits in a quarter of
      it (the rows written stream through L2 too). Round 29 (H200, EP 1): by token 1.29-1.50x where the block is
      50-67 MB (anchors 1-3), 1.07x at 17 MB (anchor-5); at two emulated ranks 0.97x at 17 MB and 0.88x at 4 MB
      (a short pull, where its three launches show).
    """
    choice = os.environ.get("MOK_PULL_ORDER", "auto")
    if choice not in ("auto", "row", "token"):
        raise ValueError(f"MOK_PULL_ORDER must be auto, row or token, got {choice!r}")
    if choice != "auto":
        return choice
    if top_k == 1:
        return "row"
    if src.remote:
        return "token"
    tokens = src.ptr_table.numel() * src.shape[0]
    block_bytes = tokens * min(src.shape[1], 1024) * src.dtype.itemsize
    return "token" if block_bytes * 4 >= _l2_bytes(src.ptr_table.device) else "row"


@functools.lru_cache(maxsize=None)
def _l2_bytes(device: torch.device) -> int:
    """The L2 cache size of ``device`` (50 MiB, an H100's or H200's, under the interpreter)."""
    if device.type != "cuda":
        return 50 << 20
    return torch.cuda.get_device_properties(device).L2_cache_size


def _launch_pull_by_token(table: RankTables, start: int, n_rows: int, src: PeerBuffer, out: torch.Tensor,
                          weights: PeerBuffer | None, weight_out: torch.Tensor | None) -> None:
    sources, tokens_local, width = src.ptr_table.numel(), src.shape[0], out.shape[1]
    slots_per_rank = tokens_local * table.top_k
    window_rank, window_slot = sources_from(table, start)
    # The window's own inverse map, not mok.schedule's dest_row: the megakernel's tables (KernelSchedule) have none,
    # and this one names window rows only, which is what the fan-out kernel writes.
    # NOTE: cleared (one fill) rather than confirmed against the table at every use: the confirmation's two
    # scattered loads per (token, k), before the row load, made the pull 2x slower (round 29, call 3).
    fanout = torch.full((sources * slots_per_rank,), -1, dtype=torch.int32, device=out.device)
    pull_weight = weights is not None
    weight_out = weight_out if pull_weight else out
    block_rows = 64
    _map_window_kernel[(cdiv(n_rows, block_rows),)](
        window_rank, window_slot, table.segment_offsets[-1:], fanout, slots_per_rank,
        out, out.stride(0), weight_out, start, n_rows, width,
        PULL_WEIGHT=pull_weight, BLOCK_ROWS=block_rows, BLOCK_COLS=min(next_power_of_2(width), 256), num_warps=4)
    tiling = TOKEN_PULL_TILING
    block_cols = min(next_power_of_2(width), 4096 if INTERPRETING else tiling["block_cols"])
    grid = (cdiv(tokens_local, tiling["block_tokens"]), cdiv(width, block_cols), sources)
    _pull_token_fanout_kernel[grid](
        src.ptr_table, width, fanout, out, out.stride(0),
        weights.ptr_table if pull_weight else src.ptr_table, weight_out,
        n_rows, tokens_local, width,
        TOP_K=table.top_k, SRC_DTYPE=_row_dtype(src.dtype), SRC_ALIGNED=peer_aligned(src), PULL_WEIGHT=pull_weight,
        BLOCK_TOKENS=tiling["block_tokens"], BLOCK_COLS=block_cols, num_warps=tiling["num_warps"])


def _launch_pull(table: RankTables, start: int, n_rows: int, src: PeerBuffer, out: torch.Tensor,
                 weights: PeerBuffer | None, weight_out: torch.Tensor | None) -> None:
    if n_rows <= 0:
        return
    width = out.shape[1]
    if (src.dtype == torch.uint8) != (out.dtype == torch.uint8):
        raise TypeError(f"pull: packed (uint8) rows go into uint8 rows; got {src.dtype} -> {out.dtype}")
    if src.shape[1:] != (width,) or out.shape[0] < n_rows or out.stride(1) != 1:
        raise ValueError(f"pull: source rows {src.shape} and destination {tuple(out.shape)} disagree "
                         f"(need [{n_rows}+, {width}] with unit column stride)")
    check_device(out, src.ptr_table)
    if pull_order(table.top_k, src) == "token":
        _launch_pull_by_token(table, start, n_rows, src, out, weights, weight_out)
        return
    block_cols = min(next_power_of_2(width), 4096 if INTERPRETING else 1024)
    block_rows = 64 if INTERPRETING else 16
    grid = (cdiv(n_rows, block_rows), cdiv(width, block_cols))
    pull_weight = weights is not None
    _pull_rows_kernel[grid](
        src.ptr_table, width, *sources_from(table, start), table.segment_offsets[-1:], start,
        out, out.stride(0),
        weights.ptr_table if pull_weight else src.ptr_table, weight_out if pull_weight else out,
        n_rows, width, table.top_k,
        SRC_DTYPE=_row_dtype(src.dtype), SRC_ALIGNED=peer_aligned(src), PULL_WEIGHT=pull_weight,
        BLOCK_ROWS=block_rows, BLOCK_COLS=block_cols, num_warps=4)


def pull_token_rows(table: RankTables, start: int, n_rows: int, src: PeerBuffer, out: torch.Tensor) -> None:
    """Forward pull dispatch: ``out[j] = src[src_rank[start+j]][src_slot[start+j] // top_k]``, 0 on padding.

    Args:
        table: the expert-side rank's schedule table.
        start, n_rows: the window of table rows (a ring minibatch).
        src: the token buffers, ``[T_local, H]`` on every rank.
        out: ``[>= n_rows, H]`` expert-side rows (a ring minibatch view), src's dtype or wider (uint8 packed
            MXFP8 rows go into uint8 rows: padding rows become all-zero codes and scales, i.e. value 0).

    Rows past the table's rows in use are left untouched (no kernel reads them).
    """
    _launch_pull(table, start, n_rows, src, out, None, None)


def pull_reverse_combine(table: RankTables, start: int, n_rows: int, grad: PeerBuffer, weights: PeerBuffer,
                         grad_out: torch.Tensor, weight_out: torch.Tensor) -> None:
    """Backward pull reverse-combine: the output gradient of each row's token, unscaled, and its router weight.

    ``grad_out[j] = grad[src_rank][src_slot // top_k]`` (``[T_local, H]`` buffers) and
    ``weight_out[j] = weights[src_rank][src_slot]`` (fp32 ``[T_local * top_k]`` buffers), zeros on padding.
    """
    if weights.dtype != torch.float32 or weight_out.dtype != torch.float32:
        raise TypeError("router weights travel as fp32")
    _launch_pull(table, start, n_rows, grad, grad_out, weights, weight_out)
