"""The Triton pipeline on the GPU at real model widths (reduced token counts), anchor shapes, skewed routing,
and EP 1/2/4/8 emulated; bitwise determinism across runs, EP degrees and ring sizes.

Run on the H200: ``python -m pytest -q tests/test_triton_gpu.py``. Every buffer the pipeline allocates is
NaN-poisoned first. Tolerances: the fp64 oracle per :data:`mok.validate.TOLERANCE`; the reference backend
1e-2 (bf16) / 1e-5 (fp32, IEEE products on both sides).
"""

from __future__ import annotations

import dataclasses
import gc

import pytest
import torch

from conftest import OUTPUT_NAMES, assert_all_bitwise, assert_close_to, bits, run_layer

import mok
from mok.backends.naive import naive_moe
from mok.config import ANCHOR_SHAPES, MODELS, MoEShape, MoKConfig
from mok.validate import TOLERANCE

pytestmark = pytest.mark.gpu
DEVICE = "cuda"
VS_REFERENCE = {torch.bfloat16: 1e-2, torch.float32: 1e-5}


@pytest.fixture(autouse=True)
def poisoned_and_clean(poisoned_triton_buffers):
    yield
    gc.collect()
    torch.cuda.empty_cache()


def problem(shape: MoEShape, dtype=torch.bfloat16, seed: int = 0, skew: float = 0.0):
    """Like conftest.make_problem, but drawn on the GPU: the anchors' weights are billions of elements."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    t, h, i, e, k = shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k

    def randn(*size, scale=1.0):
        return (torch.randn(*size, generator=gen, device=DEVICE) * scale).to(dtype)

    x = randn(t, h)
    logits = torch.randn(t, e, generator=gen, device=DEVICE) - skew * torch.arange(e, device=DEVICE)
    topk_weights, topk_ids = mok.route(logits, k)
    return [x, topk_ids, topk_weights, randn(e, i, h, scale=h ** -0.5), randn(e, i, h, scale=h ** -0.5),
            randn(e, h, i, scale=i ** -0.5)]


def oracle(p):
    """The naive loop in fp64 with one copy of each input (the anchors' fp64 weights are large)."""
    x, ids, w, wg, wu, wd = (t.double().requires_grad_(True) if t.is_floating_point() else t for t in p)
    out = naive_moe(x, ids, w, wg, wu, wd)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))  # as conftest.run_layer
    out.backward(grad.to(device=out.device, dtype=p[0].dtype).double())
    return [out.detach()] + [t.grad for t in (x, w, wg, wu, wd)]


# Model widths (H, I, top-k) at 256 tokens with 16 experts (the weights and the reference's fp32 copies of
# 384 full experts would not fit next to the oracle), plus a per-GPU EP-64 slice at 2,048 tokens.
MODEL_SHAPES = [dataclasses.replace(spec.layer(256), num_experts=16) for spec in MODELS.values()]
MODEL_SHAPES.append(MODELS["kimi-k2.7"].ep_slice(64, tokens_per_gpu=256))   # 6 experts, top-1, 2,048 rows


@pytest.mark.parametrize("shape", MODEL_SHAPES, ids=lambda s: s.name)
def test_model_widths_vs_reference_oracle_and_ep(shape):
    p = problem(shape)
    got = run_layer("triton", p, ep_size=2)
    assert_close_to(got, oracle(p), TOLERANCE["bf16"], "vs fp64 oracle")
    assert_close_to(got, run_layer("reference", p), VS_REFERENCE[torch.bfloat16], "vs reference")
    assert_all_bitwise(run_layer("triton", p, ep_size=1), got, "EP 1 vs EP 2")


@pytest.mark.parametrize("shape", ANCHOR_SHAPES, ids=lambda s: s.name)
def test_anchor_shapes_reduced_tokens_vs_oracle(shape):
    p = problem(shape.with_tokens(1024))
    got = run_layer("triton", p)
    assert_close_to(got, oracle(p), TOLERANCE["bf16"], "vs fp64 oracle")


# A layer with every EP degree dividing it: 512 tokens, 32 experts.
EP_SHAPE = MoEShape("ep-sweep", 512, 2048, 1024, 32, 4)


def test_bitwise_across_runs_ep_degrees_and_rings():
    p = problem(EP_SHAPE)
    base = run_layer("triton", p)
    assert_all_bitwise(run_layer("triton", p), base, "repeated run")
    for ep_size in (2, 4, 8):
        assert_all_bitwise(run_layer("triton", p, ep_size=ep_size), base, f"EP {ep_size}")
    for ep_size, mb, ring in ((1, 256, 512), (4, 128, 256), (8, 128, None)):
        cfg = MoKConfig(minibatch_rows=mb, ring_rows=ring)
        assert_all_bitwise(run_layer("triton", p, ep_size=ep_size, config=cfg), base,
                           f"EP {ep_size}, minibatch {mb}, ring {ring}")


def test_skewed_routing_hot_expert_and_empty_experts():
    shape = EP_SHAPE
    p = problem(shape, skew=0.5)
    counts = torch.bincount(p[1].reshape(-1).long(), minlength=shape.num_experts)
    empty = (counts == 0).nonzero().reshape(-1).tolist()
    assert empty and int(counts.max()) >= shape.tokens // 2, f"routing not skewed enough: {counts.tolist()}"
    base = run_layer("triton", p, ep_size=8)
    assert_close_to(base, oracle(p), TOLERANCE["bf16"], "vs fp64 oracle")
    for name, grad in zip(OUTPUT_NAMES[3:], base[3:]):
        assert bool((bits(grad[empty]) == 0).all()), f"{name}: empty experts must get +0.0"
    for ep_size, cfg in ((1, None), (4, MoKConfig(minibatch_rows=128, ring_rows=256))):
        assert_all_bitwise(run_layer("triton", p, ep_size=ep_size, config=cfg), base, f"EP {ep_size}, {cfg}")


def test_fp32_ieee_products_vs_reference_and_ep():
    shape = MoEShape("fp32-small", 256, 512, 256, 8, 2)
    p = problem(shape, torch.float32)
    got = run_layer("triton", p, ep_size=2)
    assert_close_to(got, run_layer("reference", p), VS_REFERENCE[torch.float32], "vs reference")
    assert_close_to(got, oracle(p), TOLERANCE["fp32"], "vs fp64 oracle")
    assert_all_bitwise(run_layer("triton", p, ep_size=4, config=MoKConfig(minibatch_rows=128, ring_rows=128)),
                       got, "EP 4 with a one-minibatch ring vs EP 2")
