"""MXFP8 in the Triton pipeline on the GPU (``mok.moe(..., backend="triton", precision="mxfp8")``): model widths
and the anchor shapes at reduced token counts, skewed routing, EP 1/2/4 emulated; bitwise determinism across
runs, EP degrees and ring sizes; error figures against the fp64 oracle and the BF16 backend printed per
output (run with ``-s`` to see them).

Run on the H200: ``python -m pytest -q -s tests/test_triton_mxfp8_gpu.py`` (tests/test_triton_mxfp8.py runs
its CPU cases on CUDA too). Every buffer the pipeline allocates is poisoned first.

Bounds: vs the fp64 oracle, mok.validate.TOLERANCE["mxfp8"] on every output (relative L2), MoK's relative
L1 <= 0.1 and max abs <= 1.0 on the output, gradient cosine >= 0.995; vs the PyTorch spelling of the same
MXFP8 arithmetic (mok.triton_ref.mxfp8_rows.mxfp8_moe_torch) 1e-2 (only fp32 summation order differs, which
can flip a rare rounding or quantization step downstream).
"""

from __future__ import annotations

import gc

import pytest
import torch

from conftest import OUTPUT_NAMES, assert_all_bitwise, assert_bitwise_equal, bits, cosine, rel_err, run_layer
# The same problems, fp64 oracle and shapes as the BF16 GPU tests.
from test_triton_gpu import EP_SHAPE, MODEL_SHAPES, oracle, problem

import mok
from mok.config import ANCHOR_SHAPES, MoKConfig
from mok.validate import TOLERANCE

pytestmark = pytest.mark.gpu
DEVICE = "cuda"
VS_SEMANTICS = 1e-2
MIN_COSINE = 0.995


@pytest.fixture(autouse=True)
def poisoned_and_clean(poisoned_triton_buffers):
    from mok.mxfp8 import clear_weight_cache
    yield
    clear_weight_cache()
    gc.collect()
    torch.cuda.empty_cache()


def grad_of(p):
    """The output gradient conftest.run_layer uses (seed 1)."""
    return torch.randn(p[0].shape, generator=torch.Generator().manual_seed(1)).to(DEVICE, torch.bfloat16)


def mx_layer(p, **kw):
    return run_layer("triton", p, precision="mxfp8", **kw)


def semantics(p):
    from mok.triton_ref.mxfp8_rows import mxfp8_moe_torch
    return mxfp8_moe_torch(*p, grad_of(p))


def report_and_check(what: str, got, oracle_out, bf16=None) -> None:
    """Print the error figures of every output and assert the MXFP8 bounds (module docstring)."""
    out, want = got[0].double(), oracle_out[0]
    rel_l1 = float((out - want).abs().sum() / want.abs().sum())
    max_abs = float((out - want).abs().max())
    print(f"\n{what}: output vs fp64 oracle: relative L1 {rel_l1:.4f}, max abs {max_abs:.4f} "
          f"(|out| max {float(want.abs().max()):.2f})")
    for j, (name, g, o) in enumerate(zip(OUTPUT_NAMES, got, oracle_out)):
        assert not bool(torch.isnan(g).any()), f"{what}: {name} has NaN (an unwritten poisoned element?)"
        err, cos = rel_err(g, o), cosine(g, o)
        line = f"  {name:<15} vs oracle: relative {err:.4f}, cosine {cos:.6f}"
        if bf16 is not None:
            line += f" | vs bf16 triton: relative {rel_err(g, bf16[j]):.4f}"
        print(line)
        assert err <= TOLERANCE["mxfp8"], f"{what}: {name} relative error {err:.3e} vs the fp64 oracle"
        assert cos >= MIN_COSINE, f"{what}: {name} cosine {cos:.6f} vs the fp64 oracle"
    assert rel_l1 <= 0.1 and max_abs <= 1.0, f"{what}: MoK's MXFP8 bounds"


def assert_close(got, want, tol, what):
    for name, a, b in zip(OUTPUT_NAMES, got, want):
        err = rel_err(a, b)
        assert err < tol, f"{what}: {name} relative error {err:.3e} >= {tol:g}"


@pytest.mark.parametrize("shape", MODEL_SHAPES, ids=lambda s: s.name)
def test_model_widths_vs_semantics_oracle_and_ep(shape):
    p = problem(shape)
    ep = 2 if shape.num_experts % 2 == 0 else 1
    got = mx_layer(p, ep_size=ep)
    assert_close(got, semantics(p), VS_SEMANTICS, "vs the MXFP8 semantics in PyTorch")
    report_and_check(f"{shape.name} ({shape.describe()}), EP {ep}", got, oracle(p))
    assert_all_bitwise(mx_layer(p, ep_size=1 if ep == 2 else 3), got, "another EP degree")


@pytest.mark.parametrize("shape", ANCHOR_SHAPES, ids=lambda s: s.name)
def test_anchor_shapes_reduced_tokens(shape):
    p = problem(shape.with_tokens(1024))
    got = mx_layer(p)
    bf16 = run_layer("triton", p)
    report_and_check(f"{shape.name} at 1024 tokens", got, oracle(p), bf16)


def test_bitwise_across_runs_ep_degrees_and_rings():
    p = problem(EP_SHAPE)
    base = mx_layer(p)
    assert_all_bitwise(mx_layer(p), base, "repeated run")
    for ep_size in (2, 4):
        assert_all_bitwise(mx_layer(p, ep_size=ep_size), base, f"EP {ep_size}")
    for ep_size, mb, ring in ((1, 256, 512), (4, 128, 256)):
        cfg = MoKConfig(minibatch_rows=mb, ring_rows=ring)
        assert_all_bitwise(mx_layer(p, ep_size=ep_size, config=cfg), base,
                           f"EP {ep_size}, minibatch {mb}, ring {ring}")


def test_skewed_routing_hot_expert_and_empty_experts():
    p = problem(EP_SHAPE, skew=0.5)
    counts = torch.bincount(p[1].reshape(-1).long(), minlength=EP_SHAPE.num_experts)
    empty = (counts == 0).nonzero().reshape(-1).tolist()
    assert empty and int(counts.max()) >= EP_SHAPE.tokens // 2, f"routing not skewed enough: {counts.tolist()}"
    base = mx_layer(p, ep_size=4)
    assert_close(base, semantics(p), VS_SEMANTICS, "vs the MXFP8 semantics in PyTorch")
    report_and_check("skewed routing, EP 4", base, oracle(p))
    for name, grad in zip(OUTPUT_NAMES[3:], base[3:]):
        assert bool((bits(grad[empty]) == 0).all()), f"{name}: empty experts must get +0.0"
    assert_all_bitwise(mx_layer(p, ep_size=1, config=MoKConfig(minibatch_rows=128, ring_rows=256)), base,
                       "EP 1 with a replaying ring vs EP 4")


def test_weights_quantized_once_per_version():
    from mok.mxfp8 import weight_cache
    x, ids, w, wg, wu, wd = problem(EP_SHAPE, seed=2)
    cache = weight_cache()
    before = cache.quantizations
    with torch.no_grad():
        first = mok.moe(x, ids, w, wg, wu, wd, backend="triton", precision="mxfp8")
        again = mok.moe(x, ids, w, wg, wu, wd, backend="triton", precision="mxfp8")
        assert cache.quantizations == before + 1
        wd.add_(1e-2)   # an in-place update (what an optimizer step does)
        updated = mok.moe(x, ids, w, wg, wu, wd, backend="triton", precision="mxfp8")
    assert cache.quantizations == before + 2
    assert_bitwise_equal(again, first, "cached weights")
    assert not torch.equal(bits(updated), bits(first))
