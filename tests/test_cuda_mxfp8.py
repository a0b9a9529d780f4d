"""``backend="cuda"`` with ``precision="mxfp8"``: packed MXFP8 token rows dequantized by the megakernel's dispatch,
h rounded through MXFP8 in its gate/up epilogue, GEMMs on the exact bf16 copies of the MXFP8 weights
(mok/cuda/include/mok/mxfp8.cuh; the weight copies come from mok.mxfp8.WeightCache.dequantized).

CPU: the weight copies (exact, cached per weight version) and the precision plumbing. GPU (Hopper): the forward
against an fp64 oracle of the MXFP8 contract (with its rounding points) next to the Triton MXFP8 pipeline's own
error, bitwise determinism across runs, variants, EP degrees and ring sizes, and training gradients against the
Triton MXFP8 backward.
"""

from __future__ import annotations

import gc

import pytest
import torch
from conftest import assert_bitwise_equal, rel_err

import mok
from mok.config import MoKConfig
from mok.mxfp8 import MXFP8Weights, dequantize_torch, quantize_torch

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
requires_hopper = pytest.mark.skipif(not HOPPER,
                                     reason="the SM90 megakernel needs a Hopper GPU (compute capability 9.x)")


def tiny_weights(experts=4, inter=64, hidden=96, seed=0, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    make = lambda *shape: (torch.randn(*shape, generator=g) * 0.1).to(torch.bfloat16).to(device)  # noqa: E731
    return make(experts, inter, hidden), make(experts, inter, hidden), make(experts, hidden, inter)


# ------------------------------------------------------------------------------------------------------
# CPU
# ------------------------------------------------------------------------------------------------------

def test_cuda_backend_offers_mxfp8():
    import mok.cuda.backend  # noqa: F401 (registers the backend)
    assert "mxfp8" in mok.get_backend("cuda").precisions


def forward_weights(w_gate, w_up, w_down):
    return mok.mxfp8.weight_cache().dequantized(w_gate, w_up, w_down, for_backward=False)


def cached_copies() -> int:
    """Weight sets whose bf16 copies the quantized-weight cache holds."""
    return sum(bool(entry.dequantized) for entry in mok.mxfp8.weight_cache().entries.values())


def test_weight_copies_are_the_dequantized_mxfp8_weights_cached_per_version():
    mok.mxfp8.clear_weight_cache()
    w_gate, w_up, w_down = tiny_weights()
    first = forward_weights(w_gate, w_up, w_down)
    expected = MXFP8Weights.quantize(w_gate, w_up, w_down, for_backward=False, cache=False).dequantized()
    for got, want, name in zip(first, expected, ("w_gate", "w_up", "w_down")):
        assert got.dtype == torch.bfloat16 and got.is_contiguous()
        assert_bitwise_equal(got, want, name)
    # The dequantized values are the weights rounded to E4M3 with a power-of-two scale: close, not equal.
    assert 0 < rel_err(first[0], w_gate) < 0.1
    again = forward_weights(w_gate, w_up, w_down)
    assert all(a is b for a, b in zip(again, first)), "unchanged weights must reuse the cached copies"
    with torch.no_grad():
        w_up.mul_(2.0)  # an in-place update (an optimizer step) bumps the version: new copies
    updated = forward_weights(w_gate, w_up, w_down)
    assert updated[1] is not first[1]
    assert_bitwise_equal(updated[1], MXFP8Weights.quantize(w_gate, w_up, w_down, for_backward=False,
                                                           cache=False).dequantized()[1], "w_up after the update")


def test_weight_copies_leave_with_their_weights():
    mok.mxfp8.clear_weight_cache()
    weights = tiny_weights(seed=3)
    forward_weights(*weights)
    assert cached_copies() == 1
    del weights  # the weights go, so does their cache entry, and with it the bf16 copies
    gc.collect()
    assert cached_copies() == 0


def test_prepare_packs_the_tokens_and_takes_the_dequantized_weights():
    """What an MXFP8 launch reads (CPU, no kernel): the token pointer table over packed MXFP8 rows (codes, scales,
    pad) of each emulated rank, the row pitch the kernel steps by, and the cached bf16 copies of the MXFP8
    weights; gather dispatch is refused before anything is launched."""
    from mok.cuda.backend import launch, prepare
    from mok.triton_ref.mxfp8_rows import pack_rows, packed_width
    gen = torch.Generator().manual_seed(5)
    tokens, hidden, inter, experts, top_k, ep_size = 256, 320, 64, 4, 2, 2
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    weights, ids = mok.route(torch.randn(tokens, experts, generator=gen), top_k, check_inputs=False)
    w_gate, w_up, w_down = tiny_weights(experts, inter, hidden, seed=5)
    prep = prepare(x, ids, weights, w_gate, w_up, w_down, ep_size=ep_size, precision="mxfp8")
    width = packed_width(hidden)
    assert prep.mxfp8 and prep.x_row_bytes == width == 336
    used = hidden + hidden // 32  # codes and scales; the pad bytes after them are never read
    assert_bitwise_equal(prep.x[:, :used], pack_rows(x)[:, :used], "packed token rows")
    step = tokens // ep_size * width
    assert prep.x_ptrs.tolist() == [prep.x.data_ptr() + r * step for r in range(ep_size)]
    copies = forward_weights(w_gate, w_up, w_down)
    for got, want, name in zip((prep.w_gate, prep.w_up, prep.w_down), copies, ("w_gate", "w_up", "w_down")):
        assert_bitwise_equal(got, want, name)
    bf16 = prepare(x, ids, weights, w_gate, w_up, w_down, ep_size=ep_size)
    assert not bf16.mxfp8 and bf16.x_row_bytes == 2 * hidden and bf16.w_gate.data_ptr() == w_gate.data_ptr()
    with pytest.raises(ValueError, match="ring"):
        launch(prep, dispatch="gather")


def test_prepare_rejects_an_unknown_precision():
    from mok.cuda.backend import prepare
    w_gate, w_up, w_down = tiny_weights()
    x = torch.randn(8, 96).to(torch.bfloat16)
    ids = torch.zeros(8, 1, dtype=torch.int64)
    with pytest.raises(ValueError, match="precision"):
        prepare(x, ids, torch.ones(8, 1), w_gate, w_up, w_down, precision="fp8")


# ------------------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------------------

def make_inputs(tokens, hidden, intermediate, experts, top_k, *, seed=0, skew=0.0):
    from mok.cuda.sanitize_check import make_inputs as make
    return make(tokens, hidden, intermediate, experts, top_k, seed=seed, skew=skew)


def mx_round(t: torch.Tensor) -> torch.Tensor:
    """dequantize(quantize(t along the last dim)) in bf16 (mok.mxfp8's PyTorch reference)."""
    return dequantize_torch(quantize_torch(t, -1), torch.bfloat16)


def mxfp8_oracle(x, ids, weights, w_gate, w_up, w_down):
    """fp64 sums at the MXFP8 contract's rounding points: x and the weights through MXFP8, gate and up rounded to
    bf16, h = bf16(silu(gate) * up) through MXFP8 along I, y rounded to bf16, the weighted sum over k in fp64."""
    qw = MXFP8Weights.quantize(w_gate, w_up, w_down, for_backward=False, cache=False)
    wg, wu, wd = (t.double() for t in qw.dequantized())
    xq = mx_round(x).double()
    out = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for e in range(w_gate.shape[0]):
        token, k = (ids == e).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        gate = (xq[token] @ wg[e].T).to(torch.bfloat16).double()
        up = (xq[token] @ wu[e].T).to(torch.bfloat16).double()
        h = (gate * torch.sigmoid(gate) * up).to(torch.bfloat16)
        y = (mx_round(h).double() @ wd[e].T).to(torch.bfloat16).double()
        out.index_add_(0, token, weights[token, k].double().unsqueeze(1) * y)
    return out


SHAPES = {
    # name: (T, H, I, E, K, skew)
    "basic": (256, 256, 128, 8, 2, 0.0),
    "ragged-tokens": (300, 512, 192, 4, 2, 0.0),  # T % 128 != 0, I % 128 == 64
    "h-not-256": (160, 320, 256, 8, 4, 0.0),      # packed rows of 330 bytes, padded to 336
    "top1-skew": (256, 256, 256, 8, 1, 30.0),     # fused top-1 combine, almost every row on expert 0
    "wide": (128, 1024, 512, 8, 8, 0.0),
}


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("name", list(SHAPES))
@pytest.mark.parametrize("variant", ["simple", "pipelined"])
def test_mxfp8_forward_follows_the_contract(name, variant):
    from mok.cuda.backend import sm90_forward
    t, h, i, e, k, skew = SHAPES[name]
    problem = make_inputs(t, h, i, e, k, seed=300 + list(SHAPES).index(name), skew=skew)
    out = sm90_forward(*problem, variant=variant, check=True, poison=True, precision="mxfp8")
    assert bool(torch.isfinite(out).all()), "non-finite output (an unwritten element or a stale read)"
    x, ids, weights, w_gate, w_up, w_down = problem
    oracle = mxfp8_oracle(x, ids, weights, w_gate, w_up, w_down)
    with torch.no_grad():
        triton = mok.moe(*problem, backend="triton", precision="mxfp8", check_inputs=False)
    err_cuda, err_triton = rel_err(out, oracle), rel_err(triton, oracle)
    print(f"{name} {variant}: relative error vs the MXFP8 oracle: cuda {err_cuda:.3e}, triton {err_triton:.3e}; "
          f"cuda vs triton {rel_err(out, triton):.3e}")
    assert err_cuda <= 1.25 * err_triton + 2e-3, f"cuda {err_cuda:.3e} vs triton {err_triton:.3e}"
    assert rel_err(out, triton) < 2e-2
    # MXFP8 really was applied: the bf16 layer differs from it by far more than fp32 summation order does.
    with torch.no_grad():
        bf16 = mok.moe(*problem, backend="cuda", check_inputs=False)
    assert rel_err(out, bf16) > 4 * rel_err(out, oracle)


@pytest.mark.gpu
@requires_hopper
def test_mxfp8_bitwise_across_runs_variants_ep_and_ring():
    from mok.cuda.backend import sm90_forward
    problem = make_inputs(512, 384, 192, 16, 4, seed=310, skew=1.0)
    base = sm90_forward(*problem, variant="simple", check=True, poison=True, precision="mxfp8")
    for variant in ("simple", "pipelined"):
        for ep_size in (1, 2, 4):
            for config in (None, MoKConfig(minibatch_rows=128, ring_rows=128)):
                out = sm90_forward(*problem, ep_size=ep_size, config=config, variant=variant, check=True,
                                   poison=True, precision="mxfp8")
                assert_bitwise_equal(out, base, f"mxfp8 variant={variant} ep={ep_size} config={config}")


@pytest.mark.gpu
@requires_hopper
def test_mxfp8_needs_ring_dispatch():
    from mok.cuda.backend import launch, prepare
    problem = make_inputs(128, 256, 128, 4, 2, seed=311)
    prep = prepare(*problem, precision="mxfp8")
    with pytest.raises(ValueError, match="ring"):
        launch(prep, dispatch="gather")


@pytest.mark.gpu
@requires_hopper
def test_mxfp8_training_matches_the_triton_mxfp8_backward():
    x, ids, weights, w_gate, w_up, w_down = make_inputs(384, 256, 128, 8, 2, seed=312)
    grad_out = torch.randn(x.shape, device=x.device).to(torch.bfloat16)

    def run(backend, ep_size=1):
        leaves = [t.detach().clone().requires_grad_(True) for t in (x, weights, w_gate, w_up, w_down)]
        out = mok.moe(leaves[0], ids, *leaves[1:], backend=backend, precision="mxfp8", ep_size=ep_size)
        out.backward(grad_out)
        return out.detach(), [leaf.grad for leaf in leaves]

    out_cuda, grads_cuda = run("cuda")
    out_triton, grads_triton = run("triton")
    assert rel_err(out_cuda, out_triton) < 2e-2
    for name, got, want in zip(("dx", "d_weights", "d_w_gate", "d_w_up", "d_w_down"), grads_cuda, grads_triton):
        assert got is not None and bool(torch.isfinite(got).all()), name
        err = rel_err(got, want)
        print(f"{name}: cuda vs triton MXFP8 backward {err:.3e}")
        assert err < 3e-2, f"{name}: {err:.3e}"
    _, grads_ep2 = run("cuda", ep_size=2)
    for name, a, b in zip(("dx", "d_weights", "d_w_gate", "d_w_up", "d_w_down"), grads_cuda, grads_ep2):
        assert_bitwise_equal(a, b, f"{name} EP 1 vs 2")
