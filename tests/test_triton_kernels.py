"""Each Triton stage kernel against the PyTorch semantics it implements (mok/transfers.py, mok/swiglu.py).

Runs on the CPU under TRITON_INTERPRET=1 (set here when there is no GPU, before mok.triton_ref is imported) at
tiny shapes, or on CUDA when a GPU is present. Every output buffer is poisoned with NaN first, so an element a
kernel should write but does not, or should leave alone but does, shows up.
"""

from __future__ import annotations

import pytest
import torch

from conftest import INTERPRET, TRITON_DEVICE as DEVICE  # the interpreter without a GPU
from conftest import assert_bitwise_equal, bits, make_problem, peer_copy, rel_err

from mok.comm import EmulatedPeers
from mok.schedule import build_schedule
from mok.swiglu import swiglu_backward, swiglu_forward
from mok.transfers import pull_rows, push_rows, sum_over_k
from mok.triton_ref import grouped_gemm, pull_dispatch, push_combine, swiglu

TILE = 16
T, H, I, E, K = 64, 64, 48, 8, 2   # I = 48: a column block that is not a power of two gets masked
TOL = {torch.float32: 1e-5, torch.bfloat16: 1e-2}


def nan_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan"))


def routing(ep_size: int, skew: float = 0.0, seed: int = 0):
    """A routed problem and its schedule (tile 16), the same data for every test."""
    x, ids, weights, wg, wu, wd = make_problem(T, H, I, E, K, device=DEVICE, seed=seed, skew=skew)
    return x, ids, weights, (wg, wu, wd), build_schedule(ids, E, ep_size, TILE)


def window_rows(sched, rank: int):
    """A window that starts one tile in and ends at the table's end, and its rows in use (relative)."""
    table = sched.rank(rank)
    start = TILE
    n_rows = table.capacity - start
    used = max(table.rows_used() - start, 0)
    return table, start, n_rows, used


def gemm_rows(sched, rank: int, width: int, dtype, seed: int):
    """Window rows as a dispatch would leave them: random real rows, zero padding rows, NaN past the rows in
    use (a kernel that read them would produce NaN)."""
    table, start, n_rows, used = window_rows(sched, rank)
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(n_rows, width, generator=gen).to(device=DEVICE, dtype=dtype)
    rows[table.src_rank[start:start + n_rows] < 0] = 0
    rows[used:] = float("nan")
    return table, start, n_rows, used, rows


def reference_rows(table, start: int, n_rows: int, fn) -> torch.Tensor:
    """``fn(tile_rows, local_expert)`` applied tile by tile over the real tiles of the window (fp32)."""
    out = []
    for t0 in range(0, n_rows, TILE):
        expert = int(table.tile_expert[(start + t0) // TILE])
        out.append(fn(slice(t0, t0 + TILE), expert) if expert >= 0 else None)
    return out


# ==========================================================================================================
# Transfers
# ==========================================================================================================
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_pull_token_rows_matches_transfers(dtype):
    x, _, _, _, sched = routing(ep_size=2)
    peers = EmulatedPeers(2, DEVICE)
    src = peer_copy(peers, "x", x.to(dtype))
    for rank in range(2):
        table, start, n_rows, used = window_rows(sched, rank)
        want = torch.empty(n_rows, H, dtype=dtype, device=DEVICE)
        pull_rows(table, start, start + n_rows, src, want, by_token=True)
        got = nan_like(want)
        pull_dispatch.pull_token_rows(table, start, n_rows, src, got)
        assert_bitwise_equal(got[:used], want[:used], f"rank {rank} pulled rows")
        assert bool(torch.isnan(got[used + 64:]).all()), "rows past the rows in use must be left alone"


def test_pull_reverse_combine_matches_transfers():
    x, _, weights, _, sched = routing(ep_size=2)
    peers = EmulatedPeers(2, DEVICE)
    grad = peer_copy(peers, "grad", x.to(torch.bfloat16))
    wbuf = peer_copy(peers, "w", weights.reshape(-1).float())
    for rank in range(2):
        table, start, n_rows, used = window_rows(sched, rank)
        want_g = torch.empty(n_rows, H, dtype=torch.bfloat16, device=DEVICE)
        want_w = torch.empty(n_rows, dtype=torch.float32, device=DEVICE)
        pull_rows(table, start, start + n_rows, grad, want_g, by_token=True)
        pull_rows(table, start, start + n_rows, wbuf, want_w, by_token=False)
        got_g, got_w = nan_like(want_g), nan_like(want_w)
        pull_dispatch.pull_reverse_combine(table, start, n_rows, grad, wbuf, got_g, got_w)
        assert_bitwise_equal(got_g[:used], want_g[:used], "dO rows")
        assert_bitwise_equal(got_w[:used], want_w[:used], "router weights")


def test_push_rows_matches_transfers():
    _, _, _, _, sched = routing(ep_size=2)
    peers = EmulatedPeers(2, DEVICE)
    got = peers.buffer("got", (T // 2 * K, H), torch.bfloat16)
    want = peers.buffer("want", (T // 2 * K, H), torch.bfloat16)
    for buf in (got, want):
        for view in buf.views:
            view.fill_(float("nan"))
    for rank in range(2):
        table, start, n_rows, used = window_rows(sched, rank)
        values = torch.randn(n_rows, H, generator=torch.Generator().manual_seed(rank)).to(DEVICE, torch.bfloat16)
        push_rows(table, start, start + n_rows, values, want)
        push_combine.push_rows(table, start, n_rows, values, got)
    for rank in range(2):  # slots the window does not cover stay NaN in both
        assert_bitwise_equal(got[rank], want[rank], f"slots of rank {rank}")


def test_push_router_grad_sums_partials_in_order_and_pushes():
    _, _, _, _, sched = routing(ep_size=2)
    peers = EmulatedPeers(2, DEVICE)
    got = peers.buffer("got", (T // 2 * K,), torch.float32)
    want = peers.buffer("want", (T // 2 * K,), torch.float32)
    for buf in (got, want):
        for view in buf.views:
            view.fill_(float("nan"))
    for rank in range(2):
        table, start, n_rows, _ = window_rows(sched, rank)
        partials = torch.randn(n_rows, 3, generator=torch.Generator().manual_seed(rank)).to(DEVICE)
        total = torch.zeros(n_rows, device=DEVICE)
        for p in range(3):
            total += partials[:, p]
        push_rows(table, start, start + n_rows, total, want)
        push_combine.push_router_grad(table, start, n_rows, partials, got)
    for rank in range(2):
        assert_bitwise_equal(got[rank], want[rank], f"dw slots of rank {rank}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("weighted", [True, False])
def test_sum_over_k_matches_transfers(dtype, weighted):
    gen = torch.Generator().manual_seed(3)
    tokens, top_k = 40, 4
    slots = torch.randn(tokens * top_k, H, generator=gen).to(DEVICE, dtype)
    weights = torch.rand(tokens, top_k, generator=gen).to(DEVICE)
    want = sum_over_k(slots, top_k, weights if weighted else None).to(dtype)
    got = torch.full((tokens, H), float("nan"), dtype=dtype, device=DEVICE)
    if weighted:
        push_combine.weighted_sum_over_k(slots, weights, got)
    else:
        push_combine.sum_over_k(slots, top_k, got)
    if INTERPRET:  # same fp32 operations in the same order
        assert_bitwise_equal(got, want, "sum over k")
    else:  # the GPU may contract w*y + acc into one FMA
        assert rel_err(got, want) < (1e-6 if dtype == torch.float32 else 4e-3)


# ==========================================================================================================
# Grouped GEMMs
# ==========================================================================================================
def assert_tiles(got: torch.Tensor, want_tiles, used: int, dtype, what: str) -> None:
    for t, want in enumerate(want_tiles):
        rows = slice(t * TILE, (t + 1) * TILE)
        if want is None:
            assert bool(torch.isnan(got[rows]).all()), f"{what}: unused tile {t} was written"
        else:
            assert rel_err(got[rows], want) < TOL[dtype], f"{what}: tile {t}"
    assert sum(w is not None for w in want_tiles) * TILE == used, "every tile in use is checked"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_gemm_forward_store(dtype):
    _, _, _, (_, _, w_down), sched = routing(ep_size=1)
    w = w_down.to(dtype).contiguous()                     # [E, N=H, K=I]
    table, start, n_rows, used, a = gemm_rows(sched, 0, I, dtype, seed=1)
    out = torch.full((n_rows, H), float("nan"), dtype=dtype, device=DEVICE)
    grouped_gemm.grouped_gemm_forward(a, w, table.tile_expert[start // TILE:], TILE, out=out)
    want = reference_rows(table, start, n_rows, lambda r, e: a[r].float() @ w[e].float().T)
    assert_tiles(out, want, used, dtype, "A @ W^T")


def test_grouped_gemm_empty_window_with_tma_writes_nothing():
    """An empty window (n_rows = 0) with TMA loads: no descriptor (it cannot have a zero extent), nothing written."""
    from mok.triton_ref._common import override_configs

    _, _, _, (_, _, w_down), sched = routing(ep_size=1)
    w = w_down.to(torch.bfloat16).contiguous()
    table, _, _, _, a = gemm_rows(sched, 0, I, torch.bfloat16, seed=1)
    out = torch.full((TILE, H), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    with override_configs({"down_forward": {"tma": True}}):
        grouped_gemm.grouped_gemm_forward(a, w, table.tile_expert, TILE, n_rows=0, out=out)
    assert bool(torch.isnan(out).all())


def test_grouped_gemm_forward_push_is_the_forward_combine():
    _, _, _, (_, _, w_down), sched = routing(ep_size=2)
    dtype = torch.bfloat16
    peers = EmulatedPeers(2, DEVICE)
    got = peers.buffer("got", (T // 2 * K, H), dtype)
    want = peers.buffer("want", (T // 2 * K, H), dtype)
    for buf in (got, want):
        for view in buf.views:
            view.fill_(float("nan"))
    for rank in range(2):
        w = w_down[rank * E // 2:(rank + 1) * E // 2].to(dtype).contiguous()
        table, start, n_rows, used, a = gemm_rows(sched, rank, I, dtype, seed=rank)
        stored = torch.full((n_rows, H), float("nan"), dtype=dtype, device=DEVICE)
        tile_expert = table.tile_expert[start // TILE:]
        grouped_gemm.grouped_gemm_forward(a, w, tile_expert, TILE, out=stored)
        grouped_gemm.grouped_gemm_forward(a, w, tile_expert, TILE,
                                          push=push_combine.SlotPush.window(table, start, got))
        push_rows(table, start, start + used, stored[:used], want)
    for rank in range(2):  # the push writes exactly the stored rows' bits into exactly the real slots
        assert_bitwise_equal(got[rank], want[rank], f"pushed rows, rank {rank}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_gemm_dgrad_two_phases(dtype):
    _, _, _, (w_gate, w_up, _), sched = routing(ep_size=1)
    wg, wu = w_gate.to(dtype).contiguous(), w_up.to(dtype).contiguous()   # [E, K=I, N=H]
    table, start, n_rows, used, a = gemm_rows(sched, 0, 2 * I, dtype, seed=2)
    out = torch.full((n_rows, H), float("nan"), dtype=dtype, device=DEVICE)
    grouped_gemm.grouped_gemm_dgrad(a, (wg, wu), table.tile_expert[start // TILE:], TILE, out=out)
    both = torch.cat([wg, wu], dim=1).float()
    want = reference_rows(table, start, n_rows, lambda r, e: a[r].float() @ both[e])
    assert_tiles(out, want, used, dtype, "[A1|A2] @ [W1;W2]")


def wgrad_reference(table, g, a, window_start, n_rows, local_experts):
    """fp64 sum over each expert's rows in the window of g^T a."""
    seg = table.segment_offsets.tolist()
    out = torch.zeros(local_experts, g.shape[1], a.shape[1], dtype=torch.float64, device=DEVICE)
    for e in range(local_experts):
        lo, hi = max(seg[e], window_start), min(seg[e + 1], window_start + n_rows)
        if hi > lo:
            rows = slice(lo - window_start, hi - window_start)
            out[e] = g[rows].double().T @ a[rows].double()
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_grouped_wgrad_matches_per_expert_sum_and_zeroes_empty_experts(dtype):
    _, _, _, _, sched = routing(ep_size=1, skew=0.6)
    table = sched.rank(0)
    counts = table.segment_counts.tolist()
    assert 0 in counts, "the skewed routing should leave an expert empty"
    n_rows = table.rows_used()
    gen = torch.Generator().manual_seed(4)
    g = torch.randn(n_rows, 2 * I, generator=gen).to(DEVICE, dtype)
    a = torch.randn(n_rows, H, generator=gen).to(DEVICE, dtype)
    g_slice = g[:, I:]  # a column slice of a wider buffer, as the pipeline passes d_up
    out = torch.full((E, I, H), float("nan"), dtype=dtype, device=DEVICE)
    grouped_gemm.grouped_wgrad(g_slice, a, table.segment_offsets, 0, n_rows, TILE, out=out, chain=None,
                               load_chain=False, store_final=True)
    want = wgrad_reference(table, g_slice, a, 0, n_rows, E)
    assert rel_err(out, want) < TOL[dtype]
    for e, count in enumerate(counts):
        if count == 0:
            assert bool((bits(out[e]) == 0).all()), f"empty expert {e} must get +0.0 gradients"


def test_grouped_wgrad_chain_over_windows_is_bitwise_one_window():
    """Windows visited in reverse with an fp32 chain give the bits of a single window over all rows."""
    dtype = torch.bfloat16
    _, _, _, _, sched = routing(ep_size=1)
    table = sched.rank(0)
    n_rows = table.rows_used()
    gen = torch.Generator().manual_seed(5)
    g = torch.randn(n_rows, H, generator=gen).to(DEVICE, dtype)
    a = torch.randn(n_rows, I, generator=gen).to(DEVICE, dtype)
    whole = torch.full((E, H, I), float("nan"), dtype=dtype, device=DEVICE)
    grouped_gemm.grouped_wgrad(g, a, table.segment_offsets, 0, n_rows, TILE, out=whole, chain=None,
                               load_chain=False, store_final=True)
    for window in (TILE, 3 * TILE):
        starts = list(range(0, n_rows, window))
        chained = torch.full_like(whole, float("nan"))
        chain = torch.full((E, H, I), float("nan"), dtype=torch.float32, device=DEVICE)
        for step, start in enumerate(reversed(starts)):
            rows = min(window, n_rows - start)
            grouped_gemm.grouped_wgrad(g[start:start + rows], a[start:start + rows], table.segment_offsets, start,
                                       rows, TILE, out=chained, chain=chain, load_chain=step > 0,
                                       store_final=step == len(starts) - 1)
        assert_bitwise_equal(chained, whole, f"windows of {window} rows")


@pytest.mark.parametrize("p,q", [(48, 40), (136, 200)])  # every expert's last blocks clipped at its edge
def test_grouped_wgrad_tma_store_gives_the_pointer_stores_bits(p, q):
    """TileConfig.tma_store (one TMA store of each dW tile; opt-in, round 27) writes the bits the per-thread stores
    write: the clipping at an expert's [P, Q] edge, the empty experts' +0.0, and the last window of a chain."""
    from mok.triton_ref._common import override_configs

    _, _, _, _, sched = routing(ep_size=1, skew=0.6)
    table = sched.rank(0)
    n_rows = table.rows_used()
    gen = torch.Generator().manual_seed(7)
    g = torch.randn(n_rows, p, generator=gen).to(DEVICE, torch.bfloat16)
    a = torch.randn(n_rows, q, generator=gen).to(DEVICE, torch.bfloat16)

    def run(window):
        out = torch.full((E, p, q), float("nan"), dtype=torch.bfloat16, device=DEVICE)
        chain = torch.full((E, p, q), float("nan"), dtype=torch.float32, device=DEVICE)
        starts = list(range(0, n_rows, window))
        for step, start in enumerate(reversed(starts)):
            rows = min(window, n_rows - start)
            grouped_gemm.grouped_wgrad(g[start:start + rows], a[start:start + rows], table.segment_offsets, start,
                                       rows, TILE, out=out, chain=chain, load_chain=step > 0,
                                       store_final=step == len(starts) - 1)
        return out

    for window in (n_rows, 3 * TILE):
        want = run(window)
        with override_configs({"wgrad": {"tma": True, "tma_store": True}}):
            got = run(window)
        assert_bitwise_equal(got, want, f"TMA store, {p} x {q}, windows of {window} rows")
        assert not bool(torch.isnan(got).any())


# ==========================================================================================================
# SwiGLU epilogues
# ==========================================================================================================
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_gate_up_swiglu_matches_contract(dtype):
    _, _, _, (w_gate, w_up, _), sched = routing(ep_size=1)
    wg, wu = w_gate.to(dtype).contiguous(), w_up.to(dtype).contiguous()
    table, start, n_rows, used, x = gemm_rows(sched, 0, H, dtype, seed=6)
    gate_up = torch.full((n_rows, 2 * I), float("nan"), dtype=dtype, device=DEVICE)
    h = torch.full((n_rows, I), float("nan"), dtype=dtype, device=DEVICE)
    swiglu.gate_up_swiglu(x, wg, wu, table.tile_expert[start // TILE:], TILE, gate_up_out=gate_up, h_out=h)
    both = torch.cat([wg, wu], dim=1).float()
    want_gu = reference_rows(table, start, n_rows, lambda r, e: (x[r].float() @ both[e].T).to(dtype))
    assert_tiles(gate_up, want_gu, used, dtype, "gate_up")
    # h from the kernel's own rounded gate/up, as mok.swiglu prescribes (sigmoid implementations differ in
    # the last fp32 bit, so a few bf16 roundings may differ by one ulp).
    real = slice(0, used)
    want_h = swiglu_forward(gate_up[real, :I], gate_up[real, I:]).to(dtype)
    assert rel_err(h[real], want_h) < (1e-6 if dtype == torch.float32 else 4e-3)
    assert not bool(torch.isnan(h[real]).any())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_down_dgrad_swiglu_backward_matches_contract(dtype):
    _, _, _, (_, _, w_down), sched = routing(ep_size=1)
    wd = w_down.to(dtype).contiguous()                    # [E, H, I]
    table, start, n_rows, used, d_out = gemm_rows(sched, 0, H, dtype, seed=7)
    gen = torch.Generator().manual_seed(8)
    gate_up = torch.randn(n_rows, 2 * I, generator=gen).to(DEVICE, dtype)
    weight = torch.rand(n_rows, generator=gen).to(DEVICE)
    weight[table.src_rank[start:start + n_rows] < 0] = 0
    parts = swiglu.router_grad_partials(I, H, dtype, TILE)
    d_gu = torch.full((n_rows, 2 * I), float("nan"), dtype=dtype, device=DEVICE)
    hw = torch.full((n_rows, I), float("nan"), dtype=dtype, device=DEVICE)
    partial = torch.full((n_rows, parts), float("nan"), device=DEVICE)
    swiglu.down_dgrad_swiglu_backward(d_out, wd, weight, gate_up, table.tile_expert[start // TILE:], TILE,
                                      d_gate_up_out=d_gu, hw_out=hw, dw_partial_out=partial)

    def expected(rows, e):
        g = d_out[rows].float() @ wd[e].float()
        d_gate, d_up, dw, _, h_w = swiglu_backward(gate_up[rows, :I], gate_up[rows, I:], g, weight[rows])
        return torch.cat([d_gate, d_up], 1), h_w, dw

    want = reference_rows(table, start, n_rows, expected)
    assert_tiles(d_gu, [w and w[0].to(dtype) for w in want], used, dtype, "d_gate_up")
    assert_tiles(hw, [w and w[1].to(dtype) for w in want], used, dtype, "w*h")
    dw = partial.sum(dim=1)
    for t, w in enumerate(want):
        if w is not None:
            rows = slice(t * TILE, (t + 1) * TILE)
            assert rel_err(dw[rows], w[2]) < 1e-5, f"router gradient, tile {t}"
