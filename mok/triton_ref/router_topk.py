"""The router's top-k selection: each token's ``top_k`` highest logits, ties to the lower expert id; optionally
their weights too.

Reads / writes
    * :func:`router_topk_ids`: ``logits [T, E]`` (any float dtype, compared in fp32) in, ``ids [T, top_k]`` int32
      out, in descending order of logit. Softmax and sigmoid are monotone, so the ``top_k`` highest logits are the
      ``top_k`` highest scores; :func:`mok.route` scores and gathers the weights around this kernel in PyTorch (its
      autograd), so only the selection lives here.
    * :func:`router_topk_weights`: the same ids and ``weights [T, top_k]`` fp32, what :func:`mok.route` computes
      around the selection (its ``method="fused"``), from the same registers: each round's maximum *is* the chosen
      logit. With softmax scoring and renormalisation the full softmax's denominator cancels, so a token's weights
      are a softmax over its chosen logits alone, ``exp(l_j - l_max) / sum_i exp(l_i - l_max)`` over the chosen
      ``i``; without renormalisation the denominator runs over all experts; sigmoid scores are ``1 / (1 + exp(-l))``,
      renormalised by their sum. One kernel instead of the cast, softmax, gather, sum and division (round 24's
      profile of the qwen slice: 16.1 us of the listed kernels, the division besides). The same mathematics as the
      PyTorch ops, not the same rounding: the weights differ from theirs in the last bits.

Why a kernel of its own
    ``torch.topk`` leaves the order of equal values unspecified, so :func:`mok.route` had used a stable sort of the
    whole row: a full radix sort of ``T x E`` values to keep ``T x top_k`` of them. On the H200 that sort took
    0.70 ms of a 8.7 ms layer forward at anchor-2 (32,768 tokens, 256 experts, top-16; round 16's
    ``experiments/profile_forward.py``). Selecting is cheaper than sorting: ``top_k`` rounds of a row maximum,
    0.10 ms there (``experiments/router_topk_bench.py``; ``torch.topk`` took 0.47 ms).

A twin in CUDA
    On Hopper :func:`mok.route` may run ``mok/cuda/csrc/router_topk.cu`` instead (``MOK_ROUTE_TOPK``,
    :mod:`mok.cuda.router_topk`): one warp per token whose lanes sort their own few logits first, 0.30x this kernel's
    time at anchor-2 (round 33). It gives the same ids and the same weight bits: it uses the instructions this kernel
    compiles to (``ex2.approx.f32`` of ``x * log2e`` for ``tl.exp``, ``div.full.f32`` for a division), and the
    renormalisation sums the chosen scores slot by slot here (:func:`sum_in_slot_order`), an order that does not depend
    on how Triton lays a tile over the lanes.

Tiling
    A program owns ``BLOCK_T`` whole token rows (``BLOCK_E`` = E rounded up to a power of two, padding masked out)
    and keeps them in registers, one warp per program for rows of up to 2,048 experts (:func:`default_tiling`).
    Each round takes the row maximum, the lowest column holding it (the tie rule), and retires that column. Every token's choice is made by one program in a fixed order, so the result depends on
    the logits only: the same bits for any batch split, any EP degree, any run.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ._common import cdiv, check_device, next_power_of_2

# Rows of up to this many experts stay in registers (a larger router falls back to a sort in mok.route).
MAX_EXPERTS = 4096


@triton.jit
def router_topk_kernel(logits_ptr, ids_ptr, weights_ptr, num_tokens, num_experts, stride_token,
                       TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                       WEIGHTS: tl.constexpr, SIGMOID: tl.constexpr, RENORMALIZE: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < num_tokens
    # "alive": a real expert column not chosen yet. A separate mask rather than overwriting chosen values with
    # -inf, so a logit that is itself -inf (allowed with check_inputs=False) is still chosen at most once.
    alive = row_ok[:, None] & (cols[None, :] < num_experts)
    values = tl.load(logits_ptr + rows[:, None].to(tl.int64) * stride_token + cols[None, :], mask=alive,
                     other=float("-inf")).to(tl.float32)
    if WEIGHTS:
        # The chosen logits, round j in column j (a register tile: Triton has no indexable arrays).
        slot = tl.arange(0, BLOCK_K)
        chosen = tl.zeros([BLOCK_T, BLOCK_K], dtype=tl.float32)
        denominator = tl.full([BLOCK_T], 1.0, dtype=tl.float32)  # (read only below, by a softmax over all experts)
        if not SIGMOID and not RENORMALIZE:
            # The full softmax's denominator, over every expert, before the rounds retire columns. (Rows past the
            # last token are all -inf: they get a maximum of 0 and a denominator of 1, so nothing is NaN there.)
            row_max = tl.where(row_ok, tl.max(values, axis=1), 0.0)
            denominator = tl.sum(tl.where(alive, tl.exp(values - row_max[:, None]), 0.0), axis=1)
            denominator = tl.where(row_ok, denominator, 1.0)
    for j in tl.static_range(TOP_K):
        best = tl.max(tl.where(alive, values, float("-inf")), axis=1)
        # The lowest alive column holding the maximum: equal logits go to the lower expert id.
        holds_best = alive & (values == best[:, None])
        choice = tl.min(tl.where(holds_best, cols[None, :], BLOCK_E), axis=1)
        tl.store(ids_ptr + rows.to(tl.int64) * TOP_K + j, choice, mask=row_ok)
        alive = alive & (cols[None, :] != choice[:, None])
        if WEIGHTS:
            chosen = tl.where(slot[None, :] == j, best[:, None], chosen)
    if WEIGHTS:
        kept = slot[None, :] < TOP_K
        score = chosen_weights(chosen, kept, row_ok, denominator, SIGMOID, RENORMALIZE)
        tl.store(weights_ptr + rows[:, None].to(tl.int64) * TOP_K + slot[None, :], score,
                 mask=row_ok[:, None] & kept)


@triton.jit
def chosen_weights(chosen, kept, row_ok, denominator, SIGMOID: tl.constexpr, RENORMALIZE: tl.constexpr):
    """The chosen experts' weights ``[BLOCK_T, BLOCK_K]`` from their logits ``chosen`` (``kept``: the real slots;
    ``denominator``: the full row's softmax denominator, read only for a softmax without renormalisation). Shared by
    the forward and :mod:`.router_topk_backward`, which differentiates exactly these weights."""
    if SIGMOID:
        score = tl.where(kept, 1.0 / (1.0 + tl.exp(-chosen)), 0.0)
    else:
        # The first chosen logit is the row's maximum (0 past the last token, where no slot is kept: nothing NaN).
        top = tl.where(row_ok, tl.max(tl.where(kept, chosen, float("-inf")), axis=1), 0.0)
        score = tl.where(kept, tl.exp(chosen - top[:, None]), 0.0)
    if RENORMALIZE:
        score = score / tl.where(row_ok, sum_in_slot_order(score), 1.0)[:, None]
    elif not SIGMOID:
        score = score / denominator[:, None]
    return score


@triton.jit
def sum_in_slot_order(values):
    """Row sums of a ``[BLOCK_T, BLOCK_K]`` tile added slot by slot, ``((v0 + v1) + v2) + ...``. ``tl.sum`` adds in
    a tree whose shape follows the tile's layout over the lanes (so, in principle, the tiling and the Triton version);
    this order is the same everywhere, and mok's CUDA top-k (``mok/cuda/csrc/router_topk.cu``) sums in it too, so
    the two kernels' weights are the same bits. Each slot is taken out of the tile by a sum that adds zeros to it
    (exact: the values are scores, never -0.0)."""
    slot = tl.arange(0, values.shape[1])
    total = tl.zeros([values.shape[0]], dtype=tl.float32)
    for j in tl.static_range(values.shape[1]):
        total += tl.sum(tl.where(slot[None, :] == j, values, 0.0), axis=1)
    return total


def router_topk_ids(logits: torch.Tensor, top_k: int, *, block_t: int | None = None,
                    num_warps: int | None = None) -> torch.Tensor:
    """``[T, top_k]`` int32 expert ids: each row's ``top_k`` largest logits in descending order, equal logits in
    ascending expert id (exactly what a stable descending sort of the fp32 logits keeps). Logits must not be NaN.
    ``block_t`` (token rows per program) and ``num_warps`` override the default tiling (experiments only; the ids
    do not depend on them).
    """
    return _select(logits, top_k, None, block_t, num_warps)[1]


def router_topk_weights(logits: torch.Tensor, top_k: int, *, scoring: str = "softmax",
                        renormalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``(weights [T, top_k] fp32, ids [T, top_k] int32)``: :func:`router_topk_ids`'s ids and their weights, scored
    as :func:`mok.route` scores them (``scoring`` ``"softmax"`` or ``"sigmoid"``, ``renormalize``), in one kernel
    (see the module docstring). No autograd here: :func:`mok.route` wraps it."""
    if scoring not in ("softmax", "sigmoid"):
        raise ValueError(f"scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    return _select(logits, top_k, (scoring == "sigmoid", renormalize), None, None)


def _select(logits: torch.Tensor, top_k: int, weighting: tuple[bool, bool] | None, block_t: int | None,
            num_warps: int | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Checks, then one launch: ``(weights or None, ids)``; ``weighting`` is ``(sigmoid, renormalize)`` or None."""
    check_device(logits)
    if logits.dim() != 2:
        raise ValueError(f"logits must be [tokens, experts], got shape {tuple(logits.shape)}")
    num_tokens, num_experts = logits.shape
    if not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be in [1, num_experts={num_experts}], got {top_k}")
    if num_experts > MAX_EXPERTS:
        raise ValueError(f"the router's top-k keeps a row in registers: at most {MAX_EXPERTS} experts, got "
                         f"{num_experts}")
    if logits.stride(1) != 1:
        logits = logits.contiguous()
    ids = torch.empty(num_tokens, top_k, dtype=torch.int32, device=logits.device)
    weights = None if weighting is None else torch.empty(num_tokens, top_k, dtype=torch.float32,
                                                         device=logits.device)
    sigmoid, renormalize = weighting or (False, False)
    block_e = next_power_of_2(num_experts)
    default_t, default_warps = default_tiling(block_e)
    block_t = block_t or default_t
    if num_tokens:
        router_topk_kernel[(cdiv(num_tokens, block_t),)](
            logits, ids, ids if weights is None else weights, num_tokens, num_experts, logits.stride(0),
            TOP_K=top_k, BLOCK_T=block_t, BLOCK_E=block_e, WEIGHTS=weights is not None, SIGMOID=sigmoid,
            RENORMALIZE=renormalize, BLOCK_K=next_power_of_2(top_k), num_warps=num_warps or default_warps)
    return weights, ids


def default_tiling(block_e: int) -> tuple[int, int]:
    """(token rows per program, warps) for rows of ``block_e`` columns.

    One warp per program while a row fits in it, so each round's two reductions are warp shuffles; a row split
    across warps needs shared memory and a barrier per reduction. Measured on the H200
    (``experiments/router_topk_bench.py``, round 16): 32,768 x 256, top-16 took 131 us at 16 rows x 4 warps and 99
    us at 4 rows x 1 warp; 16,384 x 384, top-8: 67 and 51 us. Up to 2,048 values per warp (64 registers a thread).
    """
    return max(1, min(4, 2048 // block_e)), max(1, block_e // 2048)
