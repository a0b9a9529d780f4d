"""The routing's backward kernel (mok.triton_ref.router_topk_backward; the interpreter on the CPU, the GPU there)
against an fp64 oracle of the weights' PyTorch ops, for every scoring; the same bits for any split of the tokens;
and mok.route's ``backward="kernel"`` (its switch, its fallback for second derivatives, its errors)."""

from __future__ import annotations

import pytest
import torch

import mok
from conftest import TRITON_DEVICE, compile_in_fresh_process
from mok.routing import _weights_of
from mok.triton_ref.router_topk import router_topk_ids
from mok.triton_ref.router_topk_backward import router_topk_backward

SCORINGS = [("softmax", True), ("softmax", False), ("sigmoid", True), ("sigmoid", False)]


def random_routing(tokens, experts, top_k, dtype, seed, device=TRITON_DEVICE):
    gen = torch.Generator().manual_seed(seed)
    logits = (torch.randn(tokens, experts, generator=gen) * 3).to(dtype)
    upstream = torch.randn(tokens, top_k, generator=gen)
    logits, upstream = logits.to(device), upstream.to(device)
    return logits, router_topk_ids(logits, top_k), upstream


def oracle(logits, ids, upstream, scoring, renormalize):
    """The gradient of the PyTorch ops' weights (mok.routing._weights_of) in fp64."""
    leaf = logits.detach().cpu().double().requires_grad_(True)
    weights = _weights_of(leaf, ids.cpu(), scoring, renormalize)
    (grad,) = torch.autograd.grad(weights, leaf, upstream.cpu().double())
    return grad


def assert_close_to_oracle(got, want, upstream, dtype):
    """fp32 rounding of sums of a few terms, each at most |g| in size (then one rounding to bf16 for bf16 logits)."""
    assert got.dtype == dtype
    scale = float(upstream.abs().max())
    err = (got.cpu().double() - want).abs()
    rel = 2.0 ** -8 if dtype == torch.bfloat16 else 0.0
    assert bool((err <= rel * want.abs() + 2e-6 * scale).all()), float(err.max())


@pytest.mark.parametrize("scoring,renormalize", SCORINGS)
@pytest.mark.parametrize("tokens,experts,top_k,dtype", [(37, 33, 5, torch.float32), (9, 6, 1, torch.bfloat16),
                                                        (21, 128, 8, torch.bfloat16), (5, 7, 7, torch.float32),
                                                        (3, 300, 4, torch.float32)])
def test_kernel_matches_an_fp64_oracle(tokens, experts, top_k, dtype, scoring, renormalize):
    logits, ids, upstream = random_routing(tokens, experts, top_k, dtype, seed=tokens * experts + top_k)
    got = router_topk_backward(logits, ids, upstream, scoring=scoring, renormalize=renormalize)
    want = oracle(logits, ids, upstream, scoring, renormalize)
    assert_close_to_oracle(got, want, upstream, dtype)
    if renormalize and scoring == "softmax" or scoring == "sigmoid":  # only the chosen experts' logits move
        unchosen = torch.ones_like(want, dtype=torch.bool).scatter_(1, ids.cpu().long(), False)
        assert bool((got.cpu()[unchosen] == 0).all())


def test_the_same_bits_for_any_split_of_the_tokens_and_any_call():
    logits, ids, upstream = random_routing(45, 64, 6, torch.float32, seed=3)
    for scoring, renormalize in SCORINGS:
        whole = router_topk_backward(logits, ids, upstream, scoring=scoring, renormalize=renormalize)
        parts = torch.cat([router_topk_backward(logits[a:b], ids[a:b], upstream[a:b], scoring=scoring,
                                                renormalize=renormalize) for a, b in ((0, 17), (17, 45))])
        again = router_topk_backward(logits, ids, upstream, scoring=scoring, renormalize=renormalize)
        assert torch.equal(parts.view(torch.int32), whole.view(torch.int32))
        assert torch.equal(again.view(torch.int32), whole.view(torch.int32))


def test_minus_inf_logits_get_a_zero_gradient():
    """With check_inputs=False a row may hold -inf logits; a chosen one weighs 0 and its gradient is 0, as in the
    PyTorch ops, and nothing is NaN."""
    logits = torch.randn(6, 10, generator=torch.Generator().manual_seed(6))
    logits[2, 3:] = float("-inf")  # three finite logits, top-5 takes two -inf ones
    logits = logits.to(TRITON_DEVICE)
    ids = router_topk_ids(logits, 5)
    upstream = torch.randn(6, 5, generator=torch.Generator().manual_seed(7)).to(TRITON_DEVICE)
    for scoring, renormalize in SCORINGS:
        got = router_topk_backward(logits, ids, upstream, scoring=scoring, renormalize=renormalize)
        want = oracle(logits, ids, upstream, scoring, renormalize)
        assert bool(got.isfinite().all()) and got[2, 3:].abs().max() == 0
        assert_close_to_oracle(got, want, upstream, torch.float32)


def test_route_takes_the_kernel_when_asked(monkeypatch):
    """mok.route(method="fused", backward="kernel") (or MOK_ROUTE_BACKWARD=kernel): the oracle's gradient, the
    torch backward's to fp32 rounding; the default takes the PyTorch ops off CUDA; a gradient of a gradient still takes the PyTorch ops (their bits); a bad
    value is refused."""
    logits, _, upstream = random_routing(30, 20, 4, torch.float32, seed=8)
    found = {}
    for backward in ("torch", "kernel"):
        leaf = logits.clone().requires_grad_(True)
        weights, ids = mok.route(leaf, 4, method="fused", backward=backward)
        (found[backward],) = torch.autograd.grad(weights, leaf, upstream)
    assert_close_to_oracle(found["kernel"], oracle(logits, ids, upstream, "softmax", True), upstream, torch.float32)
    assert not torch.equal(found["kernel"], found["torch"])  # (the kernel ran: other rounding)
    monkeypatch.delenv("MOK_ROUTE_BACKWARD", raising=False)
    leaf = logits.clone().requires_grad_(True)  # the default, auto: the PyTorch ops off CUDA
    weights, _ = mok.route(leaf, 4, method="fused")
    assert torch.equal(torch.autograd.grad(weights, leaf, upstream)[0], found["torch"])
    monkeypatch.setenv("MOK_ROUTE_BACKWARD", "kernel")
    leaf = logits.clone().requires_grad_(True)
    weights, _ = mok.route(leaf, 4, method="fused")
    (from_env,) = torch.autograd.grad(weights, leaf, upstream)
    assert torch.equal(from_env, found["kernel"])
    leaf = logits.clone().requires_grad_(True)
    weights, _ = mok.route(leaf, 4, method="fused")
    (with_graph,) = torch.autograd.grad(weights, leaf, upstream, create_graph=True)
    assert torch.equal(with_graph.detach(), found["torch"])
    monkeypatch.setenv("MOK_ROUTE_BACKWARD", "cutlass")
    with pytest.raises(ValueError, match="MOK_ROUTE_BACKWARD"):
        mok.route(logits, 4, method="fused")


def test_refuses_what_it_does_not_take():
    logits, ids, upstream = random_routing(8, 6, 2, torch.float32, seed=9)
    with pytest.raises(ValueError, match="grad_weights must be shaped like ids"):
        router_topk_backward(logits, ids, upstream[:, :1])
    with pytest.raises(ValueError, match="scoring"):
        router_topk_backward(logits, ids, upstream, scoring="relu")
    with pytest.raises(ValueError, match="logits must be"):
        router_topk_backward(logits[0], ids, upstream)


@pytest.mark.gpu
@pytest.mark.parametrize("scoring,renormalize", SCORINGS)
@pytest.mark.parametrize("tokens,experts,top_k", [(20480, 8, 1), (32768, 256, 16), (4096, 384, 8), (999, 6, 2)])
def test_gpu_kernel_matches_the_oracle_and_any_token_split(tokens, experts, top_k, scoring, renormalize):
    """At the bench's routing shapes, bf16 logits (Triton's exp is ex2.approx on the GPU: a few fp32 roundings)."""
    logits, ids, upstream = random_routing(tokens, experts, top_k, torch.bfloat16, seed=top_k, device="cuda")
    got = router_topk_backward(logits, ids, upstream, scoring=scoring, renormalize=renormalize)
    assert_close_to_oracle(got, oracle(logits, ids, upstream, scoring, renormalize), upstream, torch.bfloat16)
    shifted = router_topk_backward(logits[1:], ids[1:], upstream[1:], scoring=scoring, renormalize=renormalize)
    assert torch.equal(shifted.view(torch.int16), got[1:].view(torch.int16))


@pytest.mark.gpu
def test_gpu_route_takes_the_kernel_by_default(monkeypatch):
    """On CUDA, MOK_ROUTE_BACKWARD's default (auto) is the kernel: the same bits as backward="kernel"."""
    monkeypatch.delenv("MOK_ROUTE_BACKWARD", raising=False)
    logits, _, upstream = random_routing(4096, 64, 8, torch.bfloat16, seed=3, device="cuda")
    found = {}
    for backward in (None, "kernel", "torch"):
        leaf = logits.clone().requires_grad_(True)
        weights, _ = mok.route(leaf, 8, method="fused", backward=backward)
        (found[backward],) = torch.autograd.grad(weights, leaf, upstream)
    assert torch.equal(found[None].view(torch.int16), found["kernel"].view(torch.int16))
    assert not torch.equal(found["kernel"], found["torch"])


# Compiled (not interpreted) for sm_90 in a fresh process, so CI on a CPU machine catches a kernel that would not
# build on the GPU: the routing's backward and forward (which share chosen_weights) for every scoring, and the
# router backward's two kernels at their default tilings. Prints each one's shared memory.
_SM90_SCRIPT = r"""
import itertools, json
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mok.triton_ref import router_logits_backward as rlb, router_topk as fwd, router_topk_backward as bwd


def compile_sm90(kernel, signature, const, num_warps=4, num_stages=3):
    sig = {**signature, **{k: "constexpr" for k in const}}
    names = list(sig)
    src = ASTSource(fn=kernel, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, "num_stages": num_stages}).metadata.shared


done = {}
for sigmoid, renorm in itertools.product((False, True), (False, True)):
    const = dict(TOP_K=8, BLOCK_T=4, BLOCK_E=256, BLOCK_K=8, SIGMOID=sigmoid, RENORMALIZE=renorm)
    done[f"routing backward {sigmoid} {renorm}"] = compile_sm90(bwd.router_topk_backward_kernel, {
        "logits_ptr": "*bf16", "ids_ptr": "*i32", "grad_ptr": "*fp32", "out_ptr": "*bf16", "num_tokens": "i32",
        "num_experts": "i32", "stride_logits": "i32", "stride_out": "i32"}, const, num_warps=1)
    done[f"routing forward {sigmoid} {renorm}"] = compile_sm90(fwd.router_topk_kernel, {
        "logits_ptr": "*bf16", "ids_ptr": "*i32", "weights_ptr": "*fp32", "num_tokens": "i32", "num_experts": "i32",
        "stride_token": "i32"}, {**const, "WEIGHTS": True}, num_warps=1)
for experts in (6, 256):
    block_e, block_t, block_h, warps, stages = rlb.weight_grad_tiling(experts)
    done[f"grad_w {experts}"] = compile_sm90(rlb.router_weight_grad_kernel, {
        "g_ptr": "*fp32", "x_ptr": "*bf16", "partial_ptr": "*fp32", "num_tokens": "i32", "hidden": "i32",
        "num_experts": "i32", "chunk_tokens": "i32", "stride_g": "i32", "stride_x": "i32"},
        dict(BLOCK_E=block_e, BLOCK_T=block_t, BLOCK_H=block_h), num_warps=warps, num_stages=stages)
for weights, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
    block_t, block_e, block_h, warps, stages = rlb.input_grad_tiling(dtype)
    done[f"grad_x {weights}"] = compile_sm90(rlb.router_input_grad_kernel, {
        "g_ptr": "*fp32", "w_ptr": f"*{weights}", "out_ptr": "*bf16", "num_tokens": "i32", "hidden": "i32",
        "num_experts": "i32", "stride_g": "i32", "stride_w": "i32", "stride_out": "i32"},
        dict(W_FP32=weights == "fp32", BLOCK_T=block_t, BLOCK_E=block_e, BLOCK_H=block_h), num_warps=warps,
        num_stages=stages)
print(json.dumps(done))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="compiles without a GPU; the GPU tests run the kernels")
def test_kernels_compile_for_sm90():
    shared = compile_in_fresh_process(_SM90_SCRIPT)
    assert len(shared) == 12
    assert max(shared.values()) <= 227 * 1024, shared  # Hopper's shared memory per block
