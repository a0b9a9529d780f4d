"""The Triton pipeline (``mok.moe(..., backend="triton")``), forward and backward, at tiny shapes.

Against the reference backend and the naive fp64 oracle; bitwise determinism across repeated runs, EP degrees
and ring sizes; skewed routing with empty experts, a hot expert and a rank that receives nothing. Every buffer
the pipeline allocates is NaN-poisoned first (``set_poison``), so an element that no kernel writes cannot hide.
CPU under TRITON_INTERPRET=1 (set here when there is no GPU), or CUDA when present.
"""

from __future__ import annotations

import pytest
import torch

from conftest import TRITON_DEVICE as DEVICE  # the interpreter without a GPU
from conftest import OUTPUT_NAMES, assert_all_bitwise, assert_close_to, bits, make_problem, run_layer

import mok
from mok.config import TEST_SHAPES, MoEShape, MoKConfig
from mok.validate import TOLERANCE

TILE = 16
CONFIG = MoKConfig(expert_padding=TILE)
# Small like TEST_SHAPES, but H and I are not powers of two (masked column blocks) and top-3.
ODD_SHAPE = MoEShape("odd", 32, 48, 40, 4, 3)
VS_REFERENCE = {torch.float32: 1e-5, torch.bfloat16: 1e-2}
PRECISION = {torch.float32: "fp32", torch.bfloat16: "bf16"}


pytestmark = pytest.mark.usefixtures("poisoned_triton_buffers")


def problem(shape, dtype, **kw):
    return make_problem(shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k,
                        dtype=dtype, device=DEVICE, **kw)


def test_backend_is_registered():
    backend = mok.get_backend("triton")
    assert {"bf16", "fp32"} <= set(backend.precisions)


@pytest.mark.parametrize("shape,dtype,ep_size", [
    (TEST_SHAPES[0], torch.float32, 1),
    (TEST_SHAPES[0], torch.bfloat16, 2),
    (ODD_SHAPE, torch.bfloat16, 1),
    (TEST_SHAPES[2], torch.float32, 2),    # top-1, I > H
], ids=lambda v: getattr(v, "name", str(v)))
def test_matches_reference_and_fp64_oracle(shape, dtype, ep_size):
    p = problem(shape, dtype)
    got = run_layer("triton", p, ep_size=ep_size, config=CONFIG)
    assert_close_to(got, run_layer("reference", p, config=CONFIG), VS_REFERENCE[dtype], "vs reference")
    assert_close_to(got, run_layer("oracle", p), TOLERANCE[PRECISION[dtype]], "vs fp64 oracle")


# Each (ep_size, minibatch_rows, ring_rows) walks the same rows differently: other ranks, more minibatches,
# rings too small for the forward (so the backward replays), a ring of three slots.
RING_VARIANTS = [
    (2, None, None),
    (1, 32, 64),
    (2, 16, 48),
]


def test_bitwise_across_runs_ep_degrees_and_rings_bf16():
    p = problem(TEST_SHAPES[0], torch.bfloat16)
    base = run_layer("triton", p, config=CONFIG)
    assert_all_bitwise(run_layer("triton", p, config=CONFIG), base, "repeated run")
    for ep_size, mb, ring in RING_VARIANTS:
        cfg = CONFIG.replace(minibatch_rows=mb, ring_rows=ring)
        assert_all_bitwise(run_layer("triton", p, ep_size=ep_size, config=cfg), base,
                           f"EP {ep_size}, minibatch {mb}, ring {ring}")


def test_bitwise_across_ep_degrees_and_rings_fp32():
    p = problem(TEST_SHAPES[0], torch.float32)
    base = run_layer("triton", p, config=CONFIG)
    cfg = CONFIG.replace(minibatch_rows=32, ring_rows=64)
    assert_all_bitwise(run_layer("triton", p, ep_size=2, config=cfg), base, "EP 2, minibatch 32, ring 64")


@pytest.mark.parametrize("skew", [1.0, 6.0], ids=["some-empty", "one-rank-empty"])
def test_skewed_routing_empty_experts_hot_expert(skew):
    shape = TEST_SHAPES[0]
    p = problem(shape, torch.bfloat16, skew=skew)
    counts = torch.bincount(p[1].reshape(-1).long(), minlength=shape.num_experts)
    empty = (counts == 0).nonzero().reshape(-1).tolist()
    assert empty, "the skewed routing should leave experts empty"
    if skew > 5:  # experts 0 and 1 take everything: rank 1 of EP 2 receives no row at all
        assert int(counts[shape.num_experts // 2:].sum()) == 0

    base = run_layer("triton", p, ep_size=2, config=CONFIG)
    assert_close_to(base, run_layer("oracle", p), TOLERANCE["bf16"], "vs fp64 oracle")
    for name, grad in zip(OUTPUT_NAMES[3:], base[3:]):
        assert bool((bits(grad[empty]) == 0).all()), f"{name}: empty experts must get +0.0"
    ringed = run_layer("triton", p, ep_size=1, config=CONFIG.replace(minibatch_rows=16, ring_rows=32))
    assert_all_bitwise(ringed, base, "EP 1 with a ring of 2 x 16 rows vs EP 2 with one minibatch")


def test_ring_must_hold_whole_minibatches():
    p = problem(TEST_SHAPES[0], torch.float32)
    with pytest.raises(ValueError, match="ring_rows"):
        run_layer("triton", p, config=CONFIG.replace(minibatch_rows=32, ring_rows=48))


def test_rank_run_through_a_peer_group_matches_the_emulated_run():
    """TritonRankRun (what distributed_moe(backend="triton") runs in each process) with a one-rank peer group
    in this process: x, router weights and dO copied into the group's buffers and republished for the
    replaying ring's backward; the same bits as mok.moe."""
    from mok.comm import EmulatedPeers
    from mok.triton_ref.pipeline import TritonRankRun
    p = problem(TEST_SHAPES[0], torch.bfloat16)
    cfg = CONFIG.replace(minibatch_rows=32, ring_rows=32)
    run = TritonRankRun(p[0], p[1], p[2].float(), *p[3:], rank=0, world=1, num_experts=TEST_SHAPES[0].num_experts,
                        config=cfg, peers=EmulatedPeers(1, DEVICE))
    assert any(plan.num_minibatches > plan.num_slots for plan in run.all_plans), "the ring must replay"
    out = run.forward()
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE, out.dtype)
    assert_all_bitwise([out, *run.backward(grad)], run_layer("triton", p, config=cfg), "TritonRankRun vs mok.moe")
    with pytest.raises(ValueError, match="transport must be 'peers'"):
        TritonRankRun(p[0], p[1], p[2], *p[3:], rank=0, world=1, num_experts=TEST_SHAPES[0].num_experts,
                      config=cfg, transport="collective", peers=EmulatedPeers(1, DEVICE))
