"""mok's CUDA top-k (mok/cuda/csrc/router_topk.cu, mok.cuda.router_topk) against the Triton kernel it stands in for:
the same ids and the same weight bits. On the CPU: it compiles for sm_90a without spills, the Triton kernel sums the
scores in slot order (what makes the bits reproducible in CUDA), and the switch refuses bad values. On the GPU: ids
against a stable sort and the Triton kernel, weights bit for bit, and mok.route either way."""

from __future__ import annotations

import re

import pytest
import torch
import triton
import triton.language as tl

from conftest import TRITON_DEVICE
from mok.cuda import build
from mok.cuda import router_topk as cuda_topk
from mok.triton_ref.router_topk import router_topk_ids, router_topk_weights, sum_in_slot_order

NVCC = build.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)")


@needs_nvcc
def test_compiles_for_sm90a_without_spills(tmp_path):
    proc = build.compile_object(tmp_path / "router_topk.o", verbose=True, source=build.ROUTER_TOPK_SOURCE)
    assert proc.returncode == 0, proc.stderr
    kernels = re.findall(r"Compiling entry function '(\w*router_topk_kernel\w*)'", proc.stderr)
    assert len(kernels) == 6, kernels  # 1, 2, 4, 8, 12 and 16 keys per lane
    assert not re.search(r"[1-9]\d* bytes spill", proc.stderr), proc.stderr
    assert not re.search(r"[1-9]\d* bytes stack frame", proc.stderr), proc.stderr  # the keys stay in registers


def test_the_python_mirrors_match_the_header():
    """mok.cuda.router_topk's limits and weighting codes are launch.cuh's (the Python side needs them before the
    extension is loaded)."""
    header = (build.INCLUDE_DIR / "mok" / "launch.cuh").read_text()
    assert int(re.search(r"kRouterTopkMaxExperts = (\d+);", header).group(1)) == cuda_topk.MAX_EXPERTS
    assert int(re.search(r"kRouterTopkMaxK = (\d+);", header).group(1)) == cuda_topk.MAX_TOP_K
    codes = {name: int(value) for name, value in re.findall(r"(kTopk\w+) = (\d+),", header)}
    assert codes == {"kTopkIdsOnly": cuda_topk._WEIGHTING[None],
                     "kTopkSoftmaxRenormalized": cuda_topk._WEIGHTING[("softmax", True)],
                     "kTopkSigmoid": cuda_topk._WEIGHTING[("sigmoid", False)],
                     "kTopkSigmoidRenormalized": cuda_topk._WEIGHTING[("sigmoid", True)]}


@triton.jit
def _sum_rows_kernel(values_ptr, out_ptr, BLOCK_T: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.arange(0, BLOCK_T)
    slots = tl.arange(0, BLOCK_K)
    values = tl.load(values_ptr + rows[:, None] * BLOCK_K + slots[None, :])
    tl.store(out_ptr + rows, sum_in_slot_order(values))


def test_scores_are_summed_in_slot_order():
    """1 followed by fifteen 2^-25: added one by one each small value is lost (1 + 2^-25 rounds to 1); any tree that
    pairs the small values first keeps some of them. So only the slot-by-slot order gives exactly 1.0 in row 0."""
    values = torch.full((4, 16), 2.0 ** -25)
    values[:, 0] = 1.0
    values[1] = torch.arange(16, dtype=torch.float32)  # exact in any order
    values[2, ::2] = 0.0
    values[3] = 0.0
    out = torch.empty(4)
    values_d, out_d = values.to(TRITON_DEVICE), out.to(TRITON_DEVICE)
    _sum_rows_kernel[(1,)](values_d, out_d, BLOCK_T=4, BLOCK_K=16)
    got = out_d.cpu()
    want = torch.zeros(4)
    for j in range(16):
        want = want + values[:, j]  # fp32, slot by slot
    assert torch.equal(got.view(torch.int32), want.view(torch.int32)), (got, want)
    assert got[0] == 1.0 and (values[0].double().sum() > 1.0)


def test_the_switch_refuses_unknown_values_and_stays_off_the_cpu(monkeypatch):
    logits = torch.randn(4, 8)
    monkeypatch.setenv("MOK_ROUTE_TOPK", "fast")
    with pytest.raises(ValueError, match="MOK_ROUTE_TOPK"):
        cuda_topk.select_topk(logits, 2, ("softmax", True))
    for choice in ("auto", "cuda", "triton"):
        monkeypatch.setenv("MOK_ROUTE_TOPK", choice)
        assert cuda_topk.select_topk(logits, 2, ("softmax", True)) is None  # CPU logits: the Triton kernel's
    assert not cuda_topk.applies(logits, 2, ("softmax", False))
    with pytest.raises(ValueError, match="CUDA top-k takes fp32 CUDA logits"):
        cuda_topk.router_topk(logits, 2)


class _FakeCudaLogits:
    """What select_topk reads of a CUDA tensor, on a CPU machine: the checks run, the launch goes to a fake extension."""

    is_cuda = True
    dtype = torch.float32

    def __init__(self, tokens: int, experts: int):
        self.shape = (tokens, experts)
        self.device = torch.device("cuda", 0)

    def dim(self) -> int:
        return 2

    def stride(self, dim: int) -> int:
        return 1 if dim == 1 else self.shape[1]


class _FakeExtension:
    def __init__(self):
        self.calls = []

    def router_topk(self, logits, top_k, weighting):
        self.calls.append((logits.shape, top_k, weighting))
        return "ids", "weights"


def test_the_switch_picks_the_cuda_kernel_only_where_auto_says(monkeypatch):
    """auto: the CUDA kernel for rows of AUTO_MIN_EXPERTS or more, once the extension is loaded, never for a softmax
    without renormalisation; cuda: wherever it applies (building the extension); triton: never."""
    fake = _FakeExtension()
    loaded = {"now": None}
    monkeypatch.setattr(cuda_topk, "_is_sm90", lambda index: True)
    monkeypatch.setattr(cuda_topk, "_extension", lambda build: fake if build else loaded["now"])
    wide, narrow = _FakeCudaLogits(8, cuda_topk.AUTO_MIN_EXPERTS), _FakeCudaLogits(8, cuda_topk.AUTO_MIN_EXPERTS - 1)
    softmax = ("softmax", True)
    monkeypatch.setenv("MOK_ROUTE_TOPK", "auto")
    assert cuda_topk.select_topk(wide, 4, softmax) is None  # not loaded yet: no build from routing
    loaded["now"] = fake
    assert cuda_topk.select_topk(wide, 4, softmax) == ("weights", "ids")
    assert cuda_topk.select_topk(wide, 4, None) == (None, "ids")  # ids only
    assert cuda_topk.select_topk(narrow, 4, softmax) is None
    assert cuda_topk.select_topk(wide, 4, ("softmax", False)) is None  # a denominator over every expert
    assert cuda_topk.select_topk(wide, cuda_topk.MAX_TOP_K + 1, softmax) is None
    monkeypatch.setenv("MOK_ROUTE_TOPK", "cuda")
    loaded["now"] = None
    assert cuda_topk.select_topk(narrow, 4, ("sigmoid", False)) == ("weights", "ids")
    monkeypatch.setenv("MOK_ROUTE_TOPK", "triton")
    assert cuda_topk.select_topk(wide, 4, softmax) is None
    assert fake.calls == [(wide.shape, 4, 1), (wide.shape, 4, 0), (narrow.shape, 4, 2)]


# ------------------------------------------------------------------------------------------------------------
# GPU
# ------------------------------------------------------------------------------------------------------------

SHAPES = [(32768, 256, 16), (4096, 384, 8), (1000, 6, 2), (999, 512, 32), (77, 64, 4), (5, 33, 32), (3, 1, 1),
          (2050, 160, 6)]
# Against the Triton kernel: each of its (top_k, experts, weighting) is a compile of its own (seconds each).
WEIGHT_SHAPES = [(32768, 256, 16), (2050, 160, 6), (5, 33, 32)]


def _logits(tokens: int, experts: int, seed: int) -> torch.Tensor:
    """fp32 logits rounded through bf16 (a bf16 router's: many exact ties per row), every other row scaled by 40 (so
    exp underflows to subnormals and zeros there), with a row of ties, a row of -inf but one, -0.0 beside +0.0."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen)
    logits[1::2] *= 40.0
    logits = logits.to(torch.bfloat16).float()
    if tokens >= 3:
        logits[0] = 0.25
        logits[1] = float("-inf")
        logits[1, experts // 2] = 1.0
        logits[2, : experts // 2] = -0.0
        logits[2, experts // 2:] = 0.0
    return logits.cuda()


def _sorted_ids(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    return torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :top_k].to(torch.int32)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens,experts,top_k", SHAPES)
def test_gpu_ids_match_a_stable_sort(tokens, experts, top_k):
    logits = _logits(tokens, experts, seed=experts + top_k)
    _, ids = cuda_topk.router_topk(logits, top_k, scoring=None)
    assert ids.dtype == torch.int32 and ids.shape == (tokens, top_k)
    assert torch.equal(ids, _sorted_ids(logits, top_k))


@pytest.mark.gpu
@pytest.mark.parametrize("weighting", [("softmax", True), ("sigmoid", True), ("sigmoid", False)])
@pytest.mark.parametrize("tokens,experts,top_k", WEIGHT_SHAPES)
def test_gpu_weights_are_the_triton_kernels_bits(tokens, experts, top_k, weighting):
    """The Triton kernel's ids and weights bit for bit (int32 views: -0.0 and +0.0 differ), and the same bits on a
    second call."""
    scoring, renormalize = weighting
    logits = _logits(tokens, experts, seed=3 * experts + top_k)
    weights, ids = cuda_topk.router_topk(logits, top_k, scoring=scoring, renormalize=renormalize)
    want_w, want_ids = router_topk_weights(logits, top_k, scoring=scoring, renormalize=renormalize)
    assert torch.equal(ids, want_ids)
    assert torch.equal(weights.view(torch.int32), want_w.view(torch.int32))
    again, _ = cuda_topk.router_topk(logits, top_k, scoring=scoring, renormalize=renormalize)
    assert torch.equal(again.view(torch.int32), weights.view(torch.int32))


@pytest.mark.gpu
def test_gpu_route_gives_the_same_bits_with_either_kernel(monkeypatch):
    """mok.route through the switch: cuda and triton give the same weights, ids and gradient; a strided view too."""
    import mok

    wide = _logits(4096, 300, seed=1)
    for logits in (wide[:, :256], wide.contiguous()):
        found = {}
        for choice in ("triton", "cuda"):
            monkeypatch.setenv("MOK_ROUTE_TOPK", choice)
            leaf = logits.detach().clone().requires_grad_(True)
            weights, ids = mok.route(leaf, 8, check_inputs=False)
            (grad,) = torch.autograd.grad(weights, leaf, torch.ones_like(weights))
            found[choice] = (weights.detach().view(torch.int32), ids, grad.view(torch.int32))
        assert all(torch.equal(a, b) for a, b in zip(found["triton"], found["cuda"]))
    # A softmax without renormalisation (a denominator over every expert) stays with the Triton kernel.
    assert cuda_topk.select_topk(wide, 8, ("softmax", False)) is None
