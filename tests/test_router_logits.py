"""The router's logits kernel (mok.triton_ref.router_logits; the interpreter on the CPU, the GPU there) against an
fp64 oracle, the exactness of its three-term split of fp32 weights, the same bits for any split of the tokens, and
mok.router_logits: its methods, its gradients (PyTorch's own), its errors, and the layer that uses it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import mok
from conftest import TRITON_DEVICE, load_experiment
from mok.triton_ref.router_logits import router_logits as kernel_logits, router_logits_tiling

CASES = [(70, 100, 6), (33, 64, 20), (5, 130, 130), (1, 8, 1)]  # experts over 128: two expert tiles


def random_router(tokens, hidden, experts, weight_dtype, seed, device=TRITON_DEVICE):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(tokens, hidden, generator=gen).to(torch.bfloat16)
    w = (torch.randn(experts, hidden, generator=gen) * 0.05).to(weight_dtype)
    return x.to(device), w.to(device)


def assert_close_to_fp64(got, x, w, rtol=4e-6):
    """fp32 rounding of a dot product: within rtol of the sum of the products' magnitudes (the H200 showed up to
    1.7e-6 at H = 7,168 with fp32 weights, round 25)."""
    want = x.double() @ w.double().T
    scale = x.double().abs() @ w.double().abs().T
    err = (got.double() - want).abs()
    assert got.dtype == torch.float32
    assert bool((err <= rtol * scale + 1e-30).all()), float((err / scale.clamp_min(1e-30)).max())


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens,hidden,experts", CASES)
def test_kernel_matches_an_fp64_oracle(tokens, hidden, experts, weight_dtype):
    x, w = random_router(tokens, hidden, experts, weight_dtype, seed=tokens + hidden + experts)
    got = kernel_logits(x, w)
    assert got.shape == (tokens, experts)
    assert_close_to_fp64(got.cpu(), x.cpu(), w.cpu())


def weights_with_every_bit(experts, hidden, seed):
    """fp32 weights over a wide range of magnitudes, full significands, and the edges of the three-term split: the
    largest fp32, values that round to bf16's infinity (but truncate to its largest), 2**-103 (1 + 2**-23): the
    smallest whose three terms are all normal bf16 numbers."""
    gen = torch.Generator().manual_seed(seed)
    sign = torch.randint(0, 2, (experts, hidden), generator=gen).float() * 2 - 1
    w = sign * (1 + torch.rand(experts, hidden, generator=gen)) * torch.exp2(
        torch.randint(-90, 90, (experts, hidden), generator=gen).float())  # 2**-90 <= |w| < 2**90
    # FLT_MAX, round-to-inf, -FLT_MAX, 2**-103 (1 + 2**-23), one whose lo is 2**-126, a negative one, 1 + 2**-23, 0
    edges = torch.tensor([0x7F7FFFFF, 0x7F7F8000, 0x7F7F8001, 0xFF7FFFFF, 0x0C000001, 0x0C008001, 0x8C008001,
                          0x3F800001, 0x00000000], dtype=torch.int64).to(torch.int32).view(torch.float32)
    w.view(-1)[:edges.numel()] = edges
    return w


def test_three_bf16_terms_hold_an_fp32_weight_exactly():
    """One-hot rows of x pick single weights: every bit of an fp32 weight (24 significand bits, which bf16 alone
    would round to 8) comes back, at the edges of the split too."""
    hidden, experts = 96, 5
    w = weights_with_every_bit(experts, hidden, seed=5)
    assert not torch.equal(w.to(torch.bfloat16).float(), w)  # the weights do use fp32's bits
    x = torch.eye(hidden, dtype=torch.bfloat16)
    got = kernel_logits(x.to(TRITON_DEVICE), w.to(TRITON_DEVICE)).cpu()
    assert torch.equal(got.view(torch.int32), w.T.contiguous().view(torch.int32))


def test_the_same_bits_for_any_split_of_the_tokens_and_any_call():
    """Splits at tile boundaries here: the interpreter's dot is NumPy's matmul, whose summation can depend on a row's
    place in the tile; the GPU test below splits anywhere (an MMA sums every row alike)."""
    x, w = random_router(150, 200, 8, torch.float32, seed=6)
    whole = kernel_logits(x, w)
    block_t = router_logits_tiling(8)[0]
    parts = torch.cat([kernel_logits(x[:block_t], w), kernel_logits(x[block_t:2 * block_t], w),
                       kernel_logits(x[2 * block_t:], w)])
    again = kernel_logits(x, w)
    for other in (parts, again):
        assert torch.equal(whole.view(torch.int32), other.view(torch.int32))


def test_kernel_refuses_what_it_does_not_take():
    x, w = random_router(4, 16, 3, torch.float32, seed=7)
    with pytest.raises(TypeError, match="bf16 x and bf16 or fp32 weights"):
        kernel_logits(x.float(), w)
    with pytest.raises(TypeError, match="bf16 x and bf16 or fp32 weights"):
        kernel_logits(x, w.double())
    with pytest.raises(ValueError, match="one hidden size"):
        kernel_logits(x, w[:, :8])


# mok.router_logits: the methods and their gradients
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
def test_kernel_method_has_the_torch_methods_gradients_bit_for_bit(weight_dtype):
    x, w = random_router(40, 48, 6, weight_dtype, seed=8)
    grad = torch.randn(40, 6, generator=torch.Generator().manual_seed(9)).to(x.device)
    found = {}
    for method in ("torch", "kernel"):
        xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        logits = mok.router_logits(xl, wl, method=method, backward="torch")
        logits.backward(grad)
        found[method] = (logits.detach(), xl.grad, wl.grad)
        assert xl.grad.dtype == x.dtype and wl.grad.dtype == w.dtype
    assert torch.allclose(found["kernel"][0], found["torch"][0], rtol=1e-5, atol=1e-5)
    for got, want in zip(found["kernel"][1:], found["torch"][1:]):
        assert torch.equal(got, want)


def test_auto_is_the_torch_method_where_the_kernel_does_not_run(monkeypatch):
    """On CPU tensors (and for activations that are not bf16) ``auto`` is ``F.linear(x.float(), w.float())``."""
    monkeypatch.delenv("MOK_ROUTER", raising=False)
    x, w = random_router(12, 16, 4, torch.float32, seed=10, device="cpu")
    want = F.linear(x.float(), w.float())
    assert torch.equal(mok.router_logits(x, w), want)
    assert torch.equal(mok.router_logits(x.float(), w), F.linear(x.float(), w))
    with pytest.raises(TypeError, match="cublas router method takes bf16 x and weights on CUDA"):
        mok.router_logits(x, w.to(torch.bfloat16), method="cublas")
    monkeypatch.setenv("MOK_ROUTER", "cutlass")
    with pytest.raises(ValueError, match="MOK_ROUTER"):
        mok.router_logits(x, w)


def test_layer_routes_fp32_logits_also_under_autocast(monkeypatch):
    """On the CPU the layer's router is F.linear(x.float(), w) as before round 25, bit for bit, and stays fp32 under
    autocast (F.linear alone would give bf16 logits there)."""
    monkeypatch.delenv("MOK_ROUTER", raising=False)
    layer = mok.MoELayer(32, 16, 8, 2, backend="reference")
    x = torch.randn(10, 32, generator=torch.Generator().manual_seed(11))
    want_weights, want_ids = mok.route(F.linear(x.float(), layer.router.weight.float()), 2)
    weights, ids = layer.route(x)
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_weights)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = mok.router_logits(x, layer.router.weight)
        assert F.linear(x, layer.router.weight).dtype == torch.bfloat16  # (what autocast does to a plain linear)
    assert logits.dtype == torch.float32 and torch.equal(logits, F.linear(x.float(), layer.router.weight.float()))


def test_leading_dimensions_and_empty_sizes():
    """x of any leading shape (flattened for the kernel); no tokens, no experts or no hidden columns."""
    x, w = random_router(12, 40, 5, torch.float32, seed=17)
    flat = mok.router_logits(x, w, method="kernel")
    shaped = mok.router_logits(x.view(3, 4, 40), w, method="kernel")
    assert shaped.shape == (3, 4, 5) and torch.equal(shaped.reshape(12, 5), flat)
    assert kernel_logits(x[:0], w).shape == (0, 5)
    assert kernel_logits(x, w[:0]).shape == (12, 0)
    assert torch.equal(kernel_logits(x[:, :0], w[:, :0]).cpu(), torch.zeros(12, 5))


@pytest.mark.gpu
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens,hidden,experts", [(4096, 7168, 6), (2048, 4096, 256), (999, 6144, 4),
                                                   (3000, 1536, 128)])
def test_gpu_kernel_matches_fp64_and_any_token_split(tokens, hidden, experts, weight_dtype, monkeypatch):
    monkeypatch.delenv("MOK_ROUTER", raising=False)
    x, w = random_router(tokens, hidden, experts, weight_dtype, seed=tokens + experts, device="cuda")
    got = kernel_logits(x, w)
    assert_close_to_fp64(got.cpu(), x.cpu(), w.cpu())
    split = torch.cat([kernel_logits(x[:tokens // 3], w), kernel_logits(x[tokens // 3:], w)])
    assert torch.equal(got.view(torch.int32), split.view(torch.int32))


@pytest.mark.gpu
@pytest.mark.parametrize("experts,weight_dtype,want_method", [(6, torch.float32, "kernel"),
                                                              (256, torch.float32, "kernel"),
                                                              (16, torch.bfloat16, "kernel"),
                                                              (17, torch.bfloat16, "cublas")])
def test_gpu_auto_router_method_and_the_cublas_method(experts, weight_dtype, want_method, monkeypatch):
    """auto's choice (bit for bit), cuBLAS's fp32 logits against the oracle, and every method's gradients equal
    to the PyTorch op's."""
    from mok.router import _is_hopper

    if not _is_hopper(torch.device("cuda")):
        pytest.skip("auto takes the kernel and cuBLAS on Hopper only")
    monkeypatch.delenv("MOK_ROUTER", raising=False)
    x, w = random_router(1000, 512, experts, weight_dtype, seed=experts, device="cuda")
    auto = mok.router_logits(x, w)
    assert torch.equal(auto.view(torch.int32), mok.router_logits(x, w, method=want_method).view(torch.int32))
    assert_close_to_fp64(auto.cpu(), x.cpu(), w.cpu())
    grad = torch.randn(1000, experts, device="cuda")
    grads = {}
    for method in ("torch", "kernel", "cublas") if weight_dtype == torch.bfloat16 else ("torch", "kernel"):
        xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        mok.router_logits(xl, wl, method=method, backward="torch").backward(grad)
        grads[method] = (xl.grad, wl.grad)
    for method, (gx, gw) in grads.items():
        assert torch.equal(gx, grads["torch"][0]) and torch.equal(gw, grads["torch"][1]), method
    # The default backward on Hopper: the kernels, bit for bit.
    monkeypatch.delenv("MOK_ROUTER_BACKWARD", raising=False)
    from mok.triton_ref.router_logits_backward import router_logits_backward

    xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    mok.router_logits(xl, wl, method=want_method).backward(grad)
    want_x, want_w = router_logits_backward(x, w, grad)
    assert torch.equal(xl.grad.view(torch.int16), want_x.view(torch.int16)) and torch.equal(wl.grad, want_w)


@pytest.mark.gpu
def test_gpu_three_bf16_terms_hold_an_fp32_weight_exactly():
    hidden, experts = 256, 16
    w = weights_with_every_bit(experts, hidden, seed=12)
    got = kernel_logits(torch.eye(hidden, dtype=torch.bfloat16, device="cuda"), w.cuda()).cpu()
    assert torch.equal(got.view(torch.int32), w.T.contiguous().view(torch.int32))


def test_router_logits_bench_says_it_needs_a_gpu():
    """experiments/router_logits_bench.py imports on the CPU and stops with a clear message there."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU test below runs the script")
    bench = load_experiment("router_logits_bench.py")
    assert set(bench.DEFAULT_SHAPES) <= set(load_experiment("cuda_breakdown.py").SHAPES)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench.main(["--shapes", "anchor-1"])


def test_router_logits_bench_goes_on_past_a_failing_tiling(capsys):
    """A tiling that fails (past the shared memory, say) is reported and skipped, not the end of the sweep."""
    attempt = load_experiment("router_logits_bench.py").attempt
    assert attempt("fine", lambda: 7) == 7

    def fails():
        raise RuntimeError("out of resource: shared memory")
    assert attempt("anchor-2 grad_x 256,64,128,8,3 fp32", fails) is None
    assert "anchor-2 grad_x 256,64,128,8,3 fp32: RuntimeError: out of resource" in capsys.readouterr().out


@pytest.mark.gpu
def test_gpu_router_logits_bench_runs(capsys, tmp_path):
    load_experiment("router_logits_bench.py").main(["--shapes", "kimi-k2.7/ep64", "--iters", "3", "--backward",
                                                     "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert "kimi-k2.7/ep64" in out and "nan" not in out and "backward kernels, fp32 W" in out
    assert (tmp_path / "r.json").exists()


@pytest.mark.gpu
def test_gpu_layer_routes_bf16_activations_through_the_kernel_and_trains(monkeypatch):
    """A bf16 layer on the GPU takes the kernel's logits (fp32 router weights), and its router weights get
    PyTorch's gradient of ``F.linear(x.float(), w)`` through them."""
    monkeypatch.delenv("MOK_ROUTER", raising=False)
    torch.manual_seed(13)
    layer = mok.MoELayer(256, 128, 16, 4, backend="triton", device="cuda", dtype=torch.bfloat16)
    x = torch.randn(300, 256, device="cuda").to(torch.bfloat16)
    weights, ids = layer.route(x)
    want_weights, want_ids = mok.route(kernel_logits(x, layer.router.weight), 4)
    assert torch.equal(ids, want_ids) and torch.equal(weights.view(torch.int32), want_weights.view(torch.int32))
    layer(x).float().square().mean().backward()
    grad = layer.router.weight.grad
    assert grad is not None and grad.dtype == torch.float32  # (the layer keeps its router in fp32)
    assert bool(grad.isfinite().all()) and bool(grad.abs().max() > 0)


def test_bench_problem_keeps_fp32_router_weights_when_asked():
    """LayerProblem(router_dtype=torch.float32): the router weights as mok.MoELayer keeps them, trained through
    mok.router_logits (on the CPU its torch method)."""
    from mok.bench.problems import LayerProblem
    from mok.config import MoEShape

    shape = MoEShape("tiny", tokens=16, hidden=32, intermediate=16, num_experts=4, top_k=2)
    problem = LayerProblem(shape, "bf16", torch.device("cpu"), n_sets=1, router_dtype=torch.float32)
    assert problem.w_router.dtype == torch.float32 and problem.xs[0].dtype == torch.bfloat16
    grads = problem.forward_backward("reference", 0)
    assert grads[1].dtype == torch.float32 and bool(grads[1].abs().max() > 0)  # the router weights' gradient


# The backward kernels (mok.triton_ref.router_logits_backward)
def assert_backward_close_to_fp64(grad_x, grad_w, x, w, grad):
    """grad_x rounded to bf16 once (half a bf16 ulp) after an fp32-accurate sum; grad_w summed in fp32, then cast to
    the weights' dtype."""
    g, xd, wd = grad.double(), x.double(), w.double()
    want_x, scale_x = g @ wd, g.abs() @ wd.abs()
    want_w, scale_w = g.T @ xd, g.abs().T @ xd.abs()
    assert grad_x.dtype == x.dtype and grad_w.dtype == w.dtype
    x_err = (grad_x.double() - want_x).abs()
    assert bool((x_err <= 2.0 ** -8 * want_x.abs() + 1e-5 * scale_x + 1e-30).all())
    w_rel = 2.0 ** -8 if w.dtype == torch.bfloat16 else 0.0
    w_err = (grad_w.double() - want_w).abs()
    assert bool((w_err <= w_rel * want_w.abs() + 4e-6 * scale_w + 1e-30).all()), float((w_err / scale_w).max())


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens,hidden,experts", CASES)
def test_backward_kernels_match_an_fp64_oracle(tokens, hidden, experts, weight_dtype):
    from mok.triton_ref.router_logits_backward import router_logits_backward

    x, w = random_router(tokens, hidden, experts, weight_dtype, seed=2 * tokens + hidden)
    grad = torch.randn(tokens, experts, generator=torch.Generator().manual_seed(experts)).to(x.device)
    grad_x, grad_w = router_logits_backward(x, w, grad)
    assert_backward_close_to_fp64(grad_x.cpu(), grad_w.cpu(), x.cpu(), w.cpu(), grad.cpu())
    again_x, again_w = router_logits_backward(x, w, grad)
    assert torch.equal(again_x.view(torch.int16), grad_x.view(torch.int16))
    assert torch.equal(again_w.view(torch.int16 if weight_dtype == torch.bfloat16 else torch.int32),
                       grad_w.view(torch.int16 if weight_dtype == torch.bfloat16 else torch.int32))
    only_x, no_w = router_logits_backward(x, w, grad, need_weight=False)
    assert no_w is None and torch.equal(only_x.view(torch.int16), grad_x.view(torch.int16))


def test_weight_gradient_in_token_chunks():
    """grad_w's sum cut into 1, 2, 3 or 5 chunks of tokens: each within fp32 rounding of the oracle, the same bits
    on every call; grad_x does not depend on it. And both at other tilings."""
    from mok.triton_ref.router_logits_backward import router_logits_backward

    x, w = random_router(300, 40, 5, torch.float32, seed=20)
    grad = torch.randn(300, 5, generator=torch.Generator().manual_seed(21)).to(x.device)
    grad_x, default_w = router_logits_backward(x, w, grad)  # (300 tokens: one chunk by default)
    for splits in (1, 2, 3, 5):
        got_x, got_w = router_logits_backward(x, w, grad, splits=splits)
        assert_backward_close_to_fp64(got_x.cpu(), got_w.cpu(), x.cpu(), w.cpu(), grad.cpu())
        assert torch.equal(got_x.view(torch.int16), grad_x.view(torch.int16))
        assert torch.equal(router_logits_backward(x, w, grad, splits=splits)[1].view(torch.int32),
                           got_w.view(torch.int32))
        if splits == 1:
            assert torch.equal(got_w.view(torch.int32), default_w.view(torch.int32))
    with pytest.raises(ValueError, match="splits must be at least 1"):
        router_logits_backward(x, w, grad, splits=0)
    # Other tilings (what router_logits_bench.py --input-tilings and --weight-tilings time): the oracle's gradients.
    other_x, _ = router_logits_backward(x, w, grad, need_weight=False, input_tiling=(32, 16, 32, 4, 2))
    _, other_w = router_logits_backward(x, w, grad, need_x=False, weight_tiling=(16, 32, 32, 4, 2))
    assert_backward_close_to_fp64(other_x.cpu(), other_w.cpu(), x.cpu(), w.cpu(), grad.cpu())


@pytest.mark.parametrize("tokens,experts,hidden", [(24576, 128, 1536), (16384, 6, 7168), (32768, 256, 4096),
                                                   (1000, 6, 7168), (0, 4, 64), (5000, 300, 64)])
def test_weight_gradient_chunks_follow_the_shape(tokens, experts, hidden):
    """Token chunks of at least MIN_CHUNK_TOKENS, and enough of them to give about TARGET_PROGRAMS programs where
    the tokens allow; the count depends on the shape alone."""
    from mok.triton_ref import router_logits_backward as module

    splits = module.weight_grad_splits(tokens, experts, hidden)
    block_e, _, block_h, _, _ = module.weight_grad_tiling(experts)
    tiles = -(-experts // block_e) * -(-hidden // block_h)
    assert splits >= 1 and (splits == 1 or tokens // splits >= module.MIN_CHUNK_TOKENS)
    assert (splits - 1) * tiles < module.TARGET_PROGRAMS  # no more chunks than the target needs
    if tokens // module.MIN_CHUNK_TOKENS > splits:  # the tokens allowed more: the target is met
        assert splits * tiles >= module.TARGET_PROGRAMS


def test_backward_kernels_carry_every_bit_of_fp32_operands():
    """Cancellations that leave only the low bits: grad_x of grad = (1, -1) against rows w and bf16(w) is w - bf16(w),
    and of grad = (a, -bf16(a)) against two equal rows is (a - bf16(a)) w; one bf16 term per fp32 operand would
    lose those residuals. grad_w of one-hot x rows gives fp32 grad back bit for bit."""
    from mok.triton_ref.router_logits_backward import router_logits_backward

    hidden = 24
    gen = torch.Generator().manual_seed(14)
    w0 = torch.randn(hidden, generator=gen) * torch.exp2(torch.randint(-8, 4, (hidden,), generator=gen).float())
    a = torch.tensor(0.7853981633974483)  # pi / 4: fp32 bits that bf16 rounds away
    ones = torch.ones(hidden).to(torch.bfloat16).float()
    w = torch.stack([w0, w0.to(torch.bfloat16).float()])
    grad = torch.tensor([[1.0, -1.0]])
    x = torch.zeros(1, hidden, dtype=torch.bfloat16)
    got, _ = router_logits_backward(x.to(TRITON_DEVICE), w.to(TRITON_DEVICE), grad.to(TRITON_DEVICE))
    residual = w0 - w0.to(torch.bfloat16).float()
    assert bool(residual.abs().min() > 0)
    assert torch.equal(got[0].cpu().view(torch.int16), residual.to(torch.bfloat16).view(torch.int16))
    grad = torch.stack([a, -a.to(torch.bfloat16).float()]).view(1, 2)
    got, _ = router_logits_backward(x.to(TRITON_DEVICE), torch.stack([ones, ones]).to(TRITON_DEVICE),
                                    grad.to(TRITON_DEVICE))
    want = (a - a.to(torch.bfloat16).float()) * ones
    assert torch.equal(got[0].cpu().view(torch.int16), want.to(torch.bfloat16).view(torch.int16))
    g = torch.randn(hidden, 5, generator=gen) * 1e-3
    _, grad_w = router_logits_backward(torch.eye(hidden, dtype=torch.bfloat16).to(TRITON_DEVICE),
                                       torch.randn(5, hidden).to(TRITON_DEVICE), g.to(TRITON_DEVICE))
    assert torch.equal(grad_w.cpu().view(torch.int32), g.T.contiguous().view(torch.int32))


def test_backward_kernels_keep_each_product():
    """Cases where one product decides the bf16 result, so dropping it shows: mid*mid (fp32 weights; grad (g, -g)
    against rows w and trunc(w), with g's and w's middle terms nonzero) and, for bf16 weights, grad's lo and mid
    terms (grad (g, -(g without its lo)) against equal rows; and (a, -bf16(a)))."""
    from mok.triton_ref.router_logits_backward import router_logits_backward

    def grad_x_of(grad_row, rows):
        x = torch.zeros(1, rows.shape[1], dtype=torch.bfloat16)
        out, _ = router_logits_backward(x.to(TRITON_DEVICE), rows.to(TRITON_DEVICE),
                                        torch.tensor([grad_row]).to(TRITON_DEVICE), need_weight=False)
        return out[0].cpu()

    def bits(v):
        return v.to(torch.bfloat16).view(torch.int16)

    g = 1 + 3 * 2.0 ** -9  # hi 1, mid 3 * 2**-9, lo 0
    m = torch.tensor([1.5, 1.25, 1.75, 1.125]) * 2.0 ** -8  # w = 1 + m: hi 1, mid m, lo 0
    w = torch.stack([1 + m, torch.ones(4)])
    want = (torch.tensor(g, dtype=torch.float64) * m.double()).float()  # g (w - trunc(w)) = g m, exact in fp32
    assert torch.equal(grad_x_of([g, -g], w).view(torch.int16), bits(want))
    assert not torch.equal(bits(want), bits(m))  # (without mid*mid the result would be m)
    g_full = torch.tensor(0.7853981633974483)  # pi / 4: every term nonzero
    g_bits = g_full.view(torch.int32)
    hi = (g_bits & -65536).view(torch.float32)
    g_no_lo = hi + ((g_full - hi).view(torch.int32) & -65536).view(torch.float32)  # hi + mid
    rows16 = torch.tensor([[1.0, 0.5, -2.0], [1.0, 0.5, -2.0]]).to(torch.bfloat16)
    want_lo = ((g_full - g_no_lo).double() * rows16[0].double()).float()
    assert float(g_full - g_no_lo) != 0
    assert torch.equal(grad_x_of([float(g_full), -float(g_no_lo)], rows16).view(torch.int16), bits(want_lo))
    want_residual = ((g_full - g_full.to(torch.bfloat16).float()).double() * rows16[0].double()).float()
    got = grad_x_of([float(g_full), -float(g_full.to(torch.bfloat16))], rows16)
    assert torch.equal(got.view(torch.int16), bits(want_residual))


def test_kernel_backward_through_autograd(monkeypatch):
    """backward="kernel" (or MOK_ROUTER_BACKWARD=kernel) gives the oracle's gradients; a backward that builds a graph
    takes the PyTorch ops, whose gradients are the torch method's bit for bit."""
    x, w = random_router(40, 48, 6, torch.float32, seed=15)
    grad = torch.randn(40, 6, generator=torch.Generator().manual_seed(16)).to(x.device)
    found = {}
    for name, kwargs in (("torch", {"method": "torch"}), ("kernel", {"method": "kernel", "backward": "kernel"})):
        xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        mok.router_logits(xl, wl, **kwargs).backward(grad)
        found[name] = (xl.grad, wl.grad)
    assert_backward_close_to_fp64(*found["kernel"], x.cpu(), w.cpu(), grad.cpu())
    monkeypatch.setenv("MOK_ROUTER_BACKWARD", "kernel")
    xl, wl = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    gx, gw = torch.autograd.grad(mok.router_logits(xl, wl, method="kernel"), (xl, wl), grad, create_graph=True)
    assert torch.equal(gx, found["torch"][0]) and torch.equal(gw, found["torch"][1])
    monkeypatch.setenv("MOK_ROUTER_BACKWARD", "cutlass")
    with pytest.raises(ValueError, match="MOK_ROUTER_BACKWARD"):
        mok.router_logits(x, w, method="kernel")


def test_kernel_backward_runs_the_kernels_with_the_gradients_asked_for(monkeypatch):
    """A spy on the backward kernels' entry: called once per backward, asked only for the gradients autograd needs,
    for x of any leading shape; what it returns is what the leaves get."""
    import mok.triton_ref.router_logits_backward as module

    calls = []
    real = module.router_logits_backward

    def spy(x, weight, grad, *, need_x=True, need_weight=True):
        calls.append((tuple(x.shape), need_x, need_weight))
        return real(x, weight, grad, need_x=need_x, need_weight=need_weight)

    monkeypatch.setattr(module, "router_logits_backward", spy)
    x, w = random_router(12, 16, 3, torch.float32, seed=18)
    grad = torch.randn(3, 4, 3, generator=torch.Generator().manual_seed(19)).to(x.device)
    for x_grad, w_grad in ((True, True), (False, True), (True, False)):
        xl, wl = x.view(3, 4, 16).clone().requires_grad_(x_grad), w.clone().requires_grad_(w_grad)
        mok.router_logits(xl, wl, method="kernel", backward="kernel").backward(grad)
        assert calls[-1] == ((12, 16), x_grad, w_grad)
        want_x, want_w = real(x, w, grad.view(12, 3))
        assert (xl.grad is None) != x_grad and (wl.grad is None) != w_grad
        if x_grad:
            assert torch.equal(xl.grad.view(12, 16), want_x)
        if w_grad:
            assert torch.equal(wl.grad, want_w)
    assert len(calls) == 3


@pytest.mark.gpu
@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("tokens,hidden,experts", [(4096, 7168, 6), (2048, 4096, 256), (999, 6144, 4),
                                                   (24576, 1536, 128)])  # (grad_w's sum in 4, 2, 1 and 22 chunks)
def test_gpu_backward_kernels_match_fp64_and_any_token_split(tokens, hidden, experts, weight_dtype):
    from mok.triton_ref.router_logits_backward import router_logits_backward

    x, w = random_router(tokens, hidden, experts, weight_dtype, seed=tokens + hidden, device="cuda")
    grad = torch.randn(tokens, experts, device="cuda")
    grad_x, grad_w = router_logits_backward(x, w, grad)
    assert_backward_close_to_fp64(grad_x.cpu(), grad_w.cpu(), x.cpu(), w.cpu(), grad.cpu())
    cut = tokens // 3
    parts = torch.cat([router_logits_backward(x[:cut], w, grad[:cut], need_weight=False)[0],
                       router_logits_backward(x[cut:], w, grad[cut:], need_weight=False)[0]])
    assert torch.equal(parts.view(torch.int16), grad_x.view(torch.int16))
    assert torch.equal(router_logits_backward(x, w, grad)[1], grad_w)
