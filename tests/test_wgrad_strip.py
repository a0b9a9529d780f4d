"""The few-rows weight-gradient kernel (``TileConfig.strip``, round 28): a program per strip of dW blocks, whose
experts with exactly one tile load G once and pipeline the blocks' loads and TMA stores. It must give the bits of
the general kernel (a program per block) for every expert: one tile (the strip loop), no rows (zeros) and several
tiles (the general order inside the strip kernel), with dW's edges clipped. Runs under TRITON_INTERPRET=1 on the
CPU (the descriptors' bounds and stores are emulated there); the GPU tests run it through the layer."""

from __future__ import annotations

import pytest
import torch

from conftest import TRITON_DEVICE as DEVICE  # the interpreter without a GPU
from conftest import (assert_bitwise_equal, assert_sm90_kernels_fit, compile_in_fresh_process, make_problem, rel_err,
                      run_layer)

from mok.config import MoKConfig
from mok.schedule import build_schedule
from mok.triton_ref import grouped_gemm
from mok.triton_ref._common import override_configs

TILE = 32             # two steps per tile are 16 rows each: the smallest MMA step the GPU compiles
E, K = 8, 2
# 64 tokens: 128 routed rows over 8 experts, half a tile each on average (the one-tile loop only); 128 tokens: a
# tile each on average, so the two-tile loop is compiled too. With skew 0.7, experts of 0 to 4 tiles.
TOKENS = [64, 128]


class Launches:
    """Counts the strip kernel's launches (so a test cannot pass with the host falling back to the general one)."""

    def __init__(self, kernel):
        self.kernel, self.count = kernel, 0

    def __getitem__(self, grid):
        self.count += 1
        return self.kernel[grid]


def problem(p: int, q: int, skew: float, tokens: int = 64):
    _, ids, *_ = make_problem(tokens, 16, 16, E, K, device=DEVICE, seed=3, skew=skew)
    table = build_schedule(ids, E, 1, TILE).rank(0)
    gen = torch.Generator().manual_seed(11)
    n_rows = table.capacity
    g = torch.randn(n_rows, p, generator=gen).to(DEVICE, torch.bfloat16)
    a = torch.randn(n_rows, q, generator=gen).to(DEVICE, torch.bfloat16)
    return table, n_rows, g, a


def wgrad(table, n_rows, g, a, overrides=None, routed_rows=None):
    out = torch.full((E, g.shape[1], a.shape[1]), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    with override_configs(overrides or {}):
        grouped_gemm.grouped_wgrad(g, a, table.segment_offsets, 0, n_rows, TILE, out=out, chain=None,
                                   load_chain=False, store_final=True, routed_rows=routed_rows)
    return out


@pytest.mark.parametrize("p,q", [(48, 40), (64, 264)])      # edges clipped; 264 = three 128-wide blocks
@pytest.mark.parametrize("strip", [1, 2])                   # 2: the last strip holds one block
@pytest.mark.parametrize("steps_per_tile", [1, 2])          # G held as one or two MMA steps
@pytest.mark.parametrize("skew", [0.0, 0.7])                # 0.7: hot experts (several tiles) and empty ones
@pytest.mark.parametrize("tokens", TOKENS)
def test_strip_kernel_gives_the_general_kernels_bits(p, q, strip, steps_per_tile, skew, tokens, monkeypatch):
    table, n_rows, g, a = problem(p, q, skew, tokens)
    routed_rows = tokens * K
    assert grouped_gemm.few_rows_per_expert(routed_rows, E, TILE)
    assert grouped_gemm._two_tiles_expected(routed_rows, E, TILE) == (tokens == 128)
    general = {"wgrad": {"tma": True, "tma_store": True, "block_k": TILE // steps_per_tile}}
    want = wgrad(table, n_rows, g, a, general, routed_rows)
    launches = Launches(grouped_gemm._grouped_wgrad_strip_kernel)
    monkeypatch.setattr(grouped_gemm, "_grouped_wgrad_strip_kernel", launches)
    # Blocks as wide as the general kernel's: the interpreter's matmul (numpy) may sum a dot in another order at
    # another width, where the GPU's MMA does not (the GPU test below compares 64- and 128-wide blocks).
    got = wgrad(table, n_rows, g, a, dict(general, wgrad_few_rows=dict(general["wgrad"], strip=strip)), routed_rows)
    assert launches.count == 1
    assert_bitwise_equal(got, want, f"strip {strip}, {steps_per_tile} steps per tile, skew {skew}")

    # and against fp32 arithmetic, so the two cannot agree on something wrong
    seg = table.segment_offsets.tolist()
    counts = [seg[e + 1] - seg[e] for e in range(E)]
    tiles = {count // TILE for count in counts}  # the kinds of experts the loops are for are there
    assert 1 in tiles and (skew == 0 or (0 in tiles and max(tiles) >= 2)) and (tokens == 64 or 2 in tiles)
    for e in range(E):
        rows = slice(seg[e], seg[e + 1])
        oracle = g[rows].float().T @ a[rows].float()
        if counts[e] == 0:
            assert bool((got[e] == 0).all())
        else:
            assert rel_err(got[e], oracle) < 1e-2


def test_strip_kernel_is_not_used_for_many_rows_or_chains(monkeypatch):
    """More than one and a half tiles per expert expected, or a window that continues or leaves a running sum:
    the general kernel."""
    launches = Launches(grouped_gemm._grouped_wgrad_strip_kernel)
    monkeypatch.setattr(grouped_gemm, "_grouped_wgrad_strip_kernel", launches)
    table, n_rows, g, a = problem(48, 40, 0.0)
    assert not grouped_gemm.few_rows_per_expert(E * TILE * 3 // 2 + 1, E, TILE)
    out = torch.full((E, 48, 40), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    chain = torch.zeros((E, 48, 40), dtype=torch.float32, device=DEVICE)
    with override_configs({"wgrad_few_rows": {"tma": True, "tma_store": True, "strip": 2}}):
        for routed_rows, load_chain, store_final in ((2 * E * TILE, False, True), (E * TILE, True, True),
                                                     (E * TILE, False, False)):
            grouped_gemm.grouped_wgrad(g, a, table.segment_offsets, 0, n_rows, TILE, out=out, chain=chain,
                                       load_chain=load_chain, store_final=store_final, routed_rows=routed_rows)
    with override_configs({"wgrad_few_rows": {"tma": True, "tma_store": True, "strip": 2, "block_k": TILE // 2}}):
        # rows per step other than the general kernel's: other sums, so never the strip kernel
        grouped_gemm.grouped_wgrad(g, a, table.segment_offsets, 0, n_rows, TILE, out=out, chain=None,
                                   load_chain=False, store_final=True, routed_rows=E * TILE)
    assert launches.count == 0


_SCRIPT = r"""
import json
import triton
from mok.triton_ref import grouped_gemm
from sm90_compile import compile_sm90

found = {}
# (block_q, strip, stages, two-tile loop): the default (64-wide, strip 64, 4 stages) with and without the two-tile
# loop, and tilings the tuner tries
for block_q, strip, stages, two_tiles in ((64, 64, 4, False), (64, 64, 4, True), (64, 64, 3, True), (128, 8, 3, False),
                                         (128, 4, 4, False)):
    types = {"g_desc": "tensordesc<bf16[64, 128]>", "a_desc": f"tensordesc<bf16[64, {block_q}]>",
             "out_desc": f"tensordesc<bf16[1, 128, {block_q}]>"}
    const = dict(TILE_ROWS=128, OUT_DTYPE=triton.language.bfloat16, TWO_TILES=two_tiles, BLOCK_P=128,
                 BLOCK_Q=block_q, BLOCK_R=64, STRIP=strip)
    found[f"{block_q} {strip} {stages} {two_tiles}"] = compile_sm90(
        grouped_gemm._grouped_wgrad_strip_kernel, types, const, num_stages=stages,
        find={"bulk_store": "cp.async.bulk.tensor.3d.global.shared", "bulk_load": "cp.async.bulk.tensor.2d.shared",
              "wgmma": "wgmma.mma_async"})
print(json.dumps(found))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="compiles without a GPU; the GPU runs the kernel itself")
def test_strip_kernel_compiles_for_sm90_with_tma_and_wgmma():
    found = compile_in_fresh_process(_SCRIPT)
    assert_sm90_kernels_fit(found, 5)
    for key, kernel in found.items():
        assert kernel["bulk_store"] and kernel["bulk_load"] and kernel["wgmma"], (key, kernel)


@pytest.mark.gpu
@pytest.mark.parametrize("strip", [4, 8])
def test_strip_kernel_on_the_gpu_gives_the_general_kernels_bits(strip):
    """The compiled kernel at the GPU's tiling (128 x 128 blocks, 64-row steps: two per tile) with dW's last
    blocks clipped: the bits of the general kernel, and close to fp32 arithmetic."""
    tokens, experts, top_k, p, q = 1024, 32, 2, 320, 1088
    _, ids, *_ = make_problem(tokens, 16, 16, experts, top_k, device="cuda", seed=5, skew=0.3)
    table = build_schedule(ids, experts, 1, 128).rank(0)
    gen = torch.Generator(device="cuda").manual_seed(2)
    g = torch.randn(table.capacity, p, generator=gen, device="cuda").to(torch.bfloat16)
    a = torch.randn(table.capacity, q, generator=gen, device="cuda").to(torch.bfloat16)

    def run(overrides):
        out = torch.full((experts, p, q), float("nan"), dtype=torch.bfloat16, device="cuda")
        with override_configs(overrides):
            grouped_gemm.grouped_wgrad(g, a, table.segment_offsets, 0, table.capacity, 128, out=out, chain=None,
                                       load_chain=False, store_final=True, routed_rows=tokens * top_k)
        return out

    want = run({"wgrad_few_rows": {"strip": 0}})  # the general kernel at its default 128 x 128 blocks
    for block_q in (64, 128):  # the strip kernel's default 128 x 64 blocks, and the general kernel's width
        got = run({"wgrad_few_rows": {"strip": strip, "block_n": block_q}})
        assert_bitwise_equal(got, want, f"strip {strip}, 128 x {block_q} blocks")
    seg = table.segment_offsets.tolist()
    for e in range(experts):
        rows = slice(seg[e], seg[e + 1])
        assert rel_err(got[e], g[rows].float().T @ a[rows].float()) < 1e-2


@pytest.mark.parametrize("ep_size", [1, 2])
def test_layer_with_the_strip_kernel_gives_the_same_bits(ep_size, monkeypatch):
    """Through the Triton pipeline (the triton backend's backward, which is also cuda's): with the strip kernel
    switched on for few rows per expert, the layer's output and five gradients keep their bits, at EP 1 and 2."""
    problem = make_problem(64, 32, 32, 16, 2, dtype=torch.bfloat16, device=DEVICE, seed=9)  # 8 rows per expert
    config = MoKConfig(expert_padding=16)
    want = run_layer("triton", problem, ep_size=ep_size, config=config)
    launches = Launches(grouped_gemm._grouped_wgrad_strip_kernel)
    monkeypatch.setattr(grouped_gemm, "_grouped_wgrad_strip_kernel", launches)
    with override_configs({"wgrad_few_rows": {"tma": True, "tma_store": True, "strip": 2}}):
        got = run_layer("triton", problem, ep_size=ep_size, config=config)
    assert launches.count == 3 * ep_size  # gate, up and down, per emulated rank
    for name, g, w in zip(("out", "dx", "d_topk_weights", "d_w_gate", "d_w_up", "d_w_down"), got, want):
        assert_bitwise_equal(g, w, f"{name} at EP {ep_size}")
