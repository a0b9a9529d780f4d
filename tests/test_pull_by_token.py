"""The by-token pull (each token row read once, stored into every table row that names it) against the by-row
pull and mok.transfers' semantics: the same bits in the same rows, padding rows zero, everything outside the
window's rows in use left alone.

CPU: under TRITON_INTERPRET=1 at tiny shapes; GPU: the same tests on CUDA. Outputs are poisoned first (NaN, or
0xFF bytes for packed rows), so a row the kernel should write and does not, or should not touch and does, shows.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import TRITON_DEVICE as DEVICE
from conftest import assert_all_bitwise, assert_bitwise_equal, make_problem, peer_copy, run_layer

from mok.comm import EmulatedPeers
from mok.schedule import build_schedule
from mok.transfers import pull_rows
from mok.triton_ref import pull_dispatch

TILE = 16
T, H, E = 48, 80, 8   # H = 80: a column block that is not a power of two gets masked


@pytest.fixture
def order(monkeypatch):
    """Run a pull in one order: ``order("token")``."""
    def use(name: str) -> None:
        monkeypatch.setenv("MOK_PULL_ORDER", name)
    return use


def schedule(ep_size: int, top_k: int, skew: float = 0.0, seed: int = 0):
    x, ids, weights, *_ = make_problem(T, H, 32, E, top_k, device=DEVICE, seed=seed, skew=skew)
    return x, weights, build_schedule(ids, E, ep_size, TILE)


def poisoned(shape, dtype) -> torch.Tensor:
    if dtype == torch.uint8:
        return torch.full(shape, 0xFF, dtype=dtype, device=DEVICE)
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def token_rows(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Source rows in ``dtype``; packed (uint8) rows are random bytes, as MXFP8 codes and scales are."""
    if dtype == torch.uint8:
        gen = torch.Generator().manual_seed(7)
        return torch.randint(0, 256, tuple(x.shape), generator=gen, dtype=torch.uint8).to(DEVICE)
    return x.to(dtype)


def windows(table):
    """The whole table, a window that starts one tile in, and a window of two tiles in the middle."""
    capacity = table.capacity
    return [(0, capacity), (TILE, capacity - TILE), (TILE, 2 * TILE)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.uint8])
@pytest.mark.parametrize("ep_size,top_k", [(1, 4), (2, 4), (2, 1)])
def test_pull_token_rows_by_token_matches_by_row(order, dtype, ep_size, top_k):
    x, _, sched = schedule(ep_size, top_k)
    peers = EmulatedPeers(ep_size, DEVICE)
    src = peer_copy(peers, "x", token_rows(x, dtype))
    for rank in range(ep_size):
        table = sched.rank(rank)
        used_total = table.rows_used()
        for start, n_rows in windows(table):
            used = max(min(used_total - start, n_rows), 0)
            got = {}
            for name in ("row", "token"):
                order(name)
                got[name] = poisoned((n_rows, H), dtype)
                pull_dispatch.pull_token_rows(table, start, n_rows, src, got[name])
            want = poisoned((n_rows, H), dtype)
            pull_rows(table, start, start + n_rows, src, want, by_token=True)
            what = f"rank {rank}, window [{start}, {start + n_rows})"
            assert_bitwise_equal(got["token"][:used], got["row"][:used], f"{what}: by token vs by row")
            assert_bitwise_equal(got["token"][:used], want[:used], f"{what}: by token vs mok.transfers")
            padding = table.src_rank[start:start + used] < 0
            assert bool((got["token"][:used][padding] == 0).all()), f"{what}: padding rows must be zero"
            untouched = poisoned((n_rows - used, H), dtype)
            assert_bitwise_equal(got["token"][used:], untouched, f"{what}: rows past the rows in use")


@pytest.mark.parametrize("ep_size", [1, 2])
def test_pull_reverse_combine_by_token_matches_by_row(order, ep_size):
    x, weights, sched = schedule(ep_size, top_k=4, skew=1.5)  # hot and empty experts
    peers = EmulatedPeers(ep_size, DEVICE)
    grad = peer_copy(peers, "grad", x.to(torch.bfloat16))
    wbuf = peer_copy(peers, "w", weights.reshape(-1).float())
    for rank in range(ep_size):
        table = sched.rank(rank)
        for start, n_rows in windows(table):
            used = max(min(table.rows_used() - start, n_rows), 0)
            got = {}
            for name in ("row", "token"):
                order(name)
                g, w = poisoned((n_rows, H), torch.bfloat16), poisoned((n_rows,), torch.float32)
                pull_dispatch.pull_reverse_combine(table, start, n_rows, grad, wbuf, g, w)
                got[name] = (g, w)
            what = f"rank {rank}, window [{start}, {start + n_rows})"
            assert_bitwise_equal(got["token"][0][:used], got["row"][0][:used], f"{what}: dO rows")
            assert_bitwise_equal(got["token"][1][:used], got["row"][1][:used], f"{what}: router weights")
            assert bool(torch.isnan(got["token"][1][used:]).all()), f"{what}: weights past the rows in use"
            real = table.src_rank[start:start + used] >= 0
            assert bool((got["token"][1][:used][~real] == 0).all()), f"{what}: padding weights must be zero"
            assert bool((got["token"][1][:used][real] != 0).all()), f"{what}: every real row has its weight"


def test_pull_order_auto_and_bad_values(order):
    peers = EmulatedPeers(1, DEVICE)
    small = peers.buffer("small", (1024, 1024), torch.bfloat16)    # 2 MB per column block: rereads hit L2
    large = peers.buffer("large", (16384, 1024), torch.bfloat16)   # 32 MB: more than a quarter of 50 MB
    assert pull_dispatch.pull_order(1, large) == "row"
    assert pull_dispatch.pull_order(8, large) == "token"
    assert pull_dispatch.pull_order(8, small) == "row"
    remote = dataclasses.replace(small, remote=True)
    assert pull_dispatch.pull_order(8, remote) == "token" and pull_dispatch.pull_order(1, remote) == "row"
    order("token")
    assert pull_dispatch.pull_order(1, small) == "token"
    order("columns")
    with pytest.raises(ValueError, match="MOK_PULL_ORDER"):
        pull_dispatch.pull_order(8, small)


@pytest.mark.gpu
@pytest.mark.parametrize("ep_size,top_k", [(1, 8), (2, 8), (4, 16)])
def test_orders_agree_at_a_realistic_shape(order, ep_size, top_k):
    """4,096 tokens x 1,024 columns over 64 experts (tiles of 128, many tokens with several rows per rank): the
    GPU kernels at full block sizes, both pulls, both orders bitwise equal, padding zero."""
    tokens, hidden, experts = 4096, 1024, 64
    x, ids, weights, *_ = make_problem(tokens, hidden, 64, experts, top_k, dtype=torch.bfloat16, device="cuda",
                                       seed=3, skew=0.5)
    sched = build_schedule(ids, experts, ep_size, 128)
    peers = EmulatedPeers(ep_size, "cuda")
    src = peer_copy(peers, "x", x)
    wbuf = peer_copy(peers, "w", weights.reshape(-1).float())
    for rank in range(ep_size):
        table = sched.rank(rank)
        used = table.rows_used()
        got = {}
        for name in ("row", "token"):
            order(name)
            g = torch.full((table.capacity, hidden), float("nan"), dtype=torch.bfloat16, device="cuda")
            w = torch.full((table.capacity,), float("nan"), device="cuda")
            pull_dispatch.pull_reverse_combine(table, 0, table.capacity, src, wbuf, g, w)
            x_rows = torch.full_like(g, float("nan"))
            pull_dispatch.pull_token_rows(table, 0, table.capacity, src, x_rows)
            got[name] = (g[:used], w[:used], x_rows[:used])
        for what, a, b in zip(("dO rows", "weights", "x rows"), got["token"], got["row"]):
            assert_bitwise_equal(a, b, f"rank {rank}: {what}")
        assert bool(torch.isfinite(got["token"][0]).all()), "every row in use written"


@pytest.mark.parametrize("ep_size", [1, 2])
def test_triton_layer_same_bits_in_both_orders(order, ep_size):
    """The whole Triton layer, forward and backward (its pulls: x forward, x again and dO + weights backward),
    pulling by token and by row: every output and gradient the same bits."""
    problem = make_problem(64, 64, 32, 8, 4, device=DEVICE, seed=5, skew=0.5)
    got = {}
    for name in ("row", "token"):
        order(name)
        got[name] = run_layer("triton", problem, ep_size=ep_size)
    assert_all_bitwise(got["token"], got["row"], f"EP {ep_size}: by token vs by row")


@pytest.mark.gpu
def test_cuda_layer_same_bits_in_both_orders(order):
    """The `cuda` backend's backward pulls the token rows again and the dO rows: both orders, the same bits."""
    problem = make_problem(2048, 512, 256, 32, 8, dtype=torch.bfloat16, device="cuda", seed=6)
    got = {}
    for name in ("row", "token"):
        order(name)
        got[name] = run_layer("cuda", problem, ep_size=2)
    assert_all_bitwise(got["token"], got["row"], "cuda, EP 2: by token vs by row")
