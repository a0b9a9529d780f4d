"""Shared test fixtures: the gpu marker, seeded random problems, bit-exact comparison."""

from __future__ import annotations

import os

import pytest
import torch

import mok

HAS_CUDA = torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def make_problem(tokens, hidden, intermediate, experts, top_k, *, dtype=torch.float32, device="cpu", seed=0,
                 scoring="softmax", skew: float = 0.0):
    """Fresh random inputs (never zeros): x, routing from random logits, and weights scaled so activations
    stay O(1). ``skew`` > 0 biases the router towards low expert ids (hot experts, empty experts)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape, scale=1.0):
        return (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype)

    x = randn(tokens, hidden)
    logits = torch.randn(tokens, experts, generator=gen)
    if skew:
        logits = logits - skew * torch.arange(experts, dtype=torch.float32)
    topk_weights, topk_ids = mok.route(logits.to(device), top_k, scoring=scoring)
    w_gate = randn(experts, intermediate, hidden, scale=hidden ** -0.5)
    w_up = randn(experts, intermediate, hidden, scale=hidden ** -0.5)
    w_down = randn(experts, hidden, intermediate, scale=intermediate ** -0.5)
    return x, topk_ids, topk_weights, w_gate, w_up, w_down


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit pattern, so -0.0 and +0.0 (and NaN payloads) compare as different."""
    t = t.detach().contiguous()
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64, 1: torch.int8}[t.element_size()])


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
    diff = (bits(a) != bits(b))
    assert not bool(diff.any()), f"{what}: {int(diff.sum())} of {a.numel()} elements differ bitwise"


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def run_layer(backend, problem, *, ep_size=1, config=None, grad_seed=1, precision=None):
    """Forward and backward; returns (out, dx, d_topk_weights, d_w_gate, d_w_up, d_w_down)."""
    x, ids, w, wg, wu, wd = (t.detach().clone() for t in problem)
    leaves = [x, w, wg, wu, wd]
    for t in leaves:
        t.requires_grad_(True)
    out = mok.moe(x, ids, w, wg, wu, wd, backend=backend, ep_size=ep_size, config=config, precision=precision)
    gen = torch.Generator(device="cpu").manual_seed(grad_seed)
    grad = torch.randn(out.shape, generator=gen).to(device=out.device, dtype=out.dtype)
    out.backward(grad)
    return [out.detach()] + [t.grad for t in leaves]


OUTPUT_NAMES = ["out", "dx", "d_topk_weights", "d_w_gate", "d_w_up", "d_w_down"]
