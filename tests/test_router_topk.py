"""The router's top-k kernel (mok.triton_ref.router_topk, run under the interpreter on the CPU) against the stable
descending sort that mok.route uses off the GPU: the same ids, bit for bit, on ties, -inf logits, odd expert
counts and padded token blocks."""

from __future__ import annotations

import pytest
import torch

from conftest import TRITON_DEVICE, load_experiment
from mok.routing import _topk_ids
from mok.triton_ref.router_topk import router_topk_ids


def sorted_ids(logits: torch.Tensor, top_k: int) -> torch.Tensor:
    return torch.sort(logits.float(), dim=-1, descending=True, stable=True).indices[:, :top_k].to(torch.int32)


@pytest.mark.parametrize("tokens,experts,top_k", [(1, 1, 1), (37, 6, 2), (70, 256, 16), (5, 384, 8), (19, 33, 33)])
def test_ids_match_a_stable_sort_on_random_logits(tokens, experts, top_k):
    gen = torch.Generator().manual_seed(tokens * 1000 + experts)
    logits = torch.randn(tokens, experts, generator=gen)
    got = router_topk_ids(logits.to(TRITON_DEVICE), top_k).cpu()
    assert got.dtype == torch.int32
    assert torch.equal(got, sorted_ids(logits, top_k))


def test_ties_go_to_the_lower_id_and_minus_inf_is_chosen_once():
    gen = torch.Generator().manual_seed(3)
    # Small integers: most rows have many equal logits. Row 0 all equal, row 1 mostly -inf, -0.0 beside +0.0.
    logits = torch.randint(-2, 3, (40, 12), generator=gen).float()
    logits[0] = 1.0
    logits[1] = float("-inf")
    logits[1, 7] = 0.0
    logits[2, :6] = -0.0
    logits[2, 6:] = 0.0
    got = router_topk_ids(logits.to(TRITON_DEVICE), 5).cpu()
    assert torch.equal(got, sorted_ids(logits, 5))
    assert got[0].tolist() == [0, 1, 2, 3, 4]
    assert got[1].tolist() == [7, 0, 1, 2, 3]
    assert got[2].tolist() == [0, 1, 2, 3, 4]


def test_bf16_logits_and_a_strided_view():
    gen = torch.Generator().manual_seed(4)
    wide = torch.randn(24, 40, generator=gen).to(torch.bfloat16)
    logits = wide[:, 3:35]  # row stride 40, not contiguous
    got = router_topk_ids(logits.to(TRITON_DEVICE), 4).cpu()
    assert torch.equal(got, sorted_ids(logits, 4))


def test_route_off_the_gpu_uses_the_same_rule():
    logits = torch.tensor([[0.5, 2.0, 2.0, -1.0]])
    assert _topk_ids(logits, 3).tolist() == [[1, 2, 0]]


def test_bad_top_k():
    with pytest.raises(ValueError, match="top_k"):
        router_topk_ids(torch.zeros(2, 4, device=TRITON_DEVICE), 5)


@pytest.mark.gpu
@pytest.mark.parametrize("tokens,experts,top_k", [(32768, 256, 16), (4096, 384, 8), (1000, 6, 2), (3, 4096, 1)])
def test_gpu_kernel_matches_the_sort_and_route_matches_the_cpu(tokens, experts, top_k):
    gen = torch.Generator().manual_seed(experts)
    # bf16 logits, as a bf16 router GEMM gives them: many exact ties per row.
    logits = torch.randn(tokens, experts, generator=gen).to(torch.bfloat16)
    got = router_topk_ids(logits.cuda(), top_k)
    assert torch.equal(got.cpu(), sorted_ids(logits, top_k))
    assert torch.equal(router_topk_ids(logits.cuda(), top_k), got)  # the same bits again
    import mok
    w_gpu, ids_gpu = mok.route(logits.cuda(), top_k)
    w_cpu, ids_cpu = mok.route(logits, top_k)
    assert torch.equal(ids_gpu.cpu(), ids_cpu)
    assert torch.allclose(w_gpu.cpu(), w_cpu, rtol=1e-6, atol=0)


def test_the_experiments_packed_key_candidate_matches_too():
    """experiments/router_topk_bench.py's one-reduction candidate (int64 keys) keeps the same ids."""
    bench = load_experiment("router_topk_bench.py")
    gen = torch.Generator().manual_seed(5)
    logits = torch.randint(-2, 3, (40, 12), generator=gen).float()
    logits[0] = float("-inf")
    logits[1, :4] = -0.0
    got = bench.packed_key_topk(logits.to(TRITON_DEVICE), 5, 4, 1).cpu()
    assert torch.equal(got, sorted_ids(logits, 5))
    assert bench.parse_shape("32768x256x16") == (32768, 256, 16)


def test_the_experiments_table_reads_back():
    """router_topk_bench.read_table parses the printed table, both round 33's (with the GPU column) and older logs."""
    bench = load_experiment("router_topk_bench.py")
    text = """| shape (T x E x k) | method | us | GPU us | GB/s of logits read (GPU) | ids as the stable sort's |
|---|---|---|---|---|---|
| 32768x256x16 | torch.topk | 474.1 | 471.4 | 71 |  |
| 32768x256x16 | CUDA kernel + softmax weights | 48.1 | 45.8 | 733 | yes |
| 24576x128x8 | kernel, 4 rows x 1 warps | 57.9 | 15.5 | 812 | NO |
| 32768x64x4 | packed-key candidate, 4 rows x 1 warps | 53.3 | 157 | yes |"""
    rows = bench.read_table(text)
    assert [r["method"] for r in rows] == ["torch.topk", "CUDA kernel + softmax weights", "kernel, 4 rows x 1 warps",
                                            "packed-key candidate, 4 rows x 1 warps"]
    assert rows[0]["ids_ok"] is None and rows[1]["ids_ok"] is True and rows[2]["ids_ok"] is False
    assert rows[1]["gpu_us"] == 45.8 and rows[1]["us"] == 48.1 and rows[3]["gpu_us"] is None


def test_the_experiments_sorted_key_candidates_match_too():
    """router_topk_bench.py's round-32 candidates (the int64 keys sorted whole, or cut by tl.topk where Triton has
    it) keep the same ids, ties, -0.0 and -inf rows included."""
    bench = load_experiment("router_topk_bench.py")
    gen = torch.Generator().manual_seed(6)
    logits = torch.randint(-2, 3, (40, 12), generator=gen).float()
    logits[0] = float("-inf")
    logits[1, :4] = -0.0
    for use_topk in (False, True) if hasattr(bench.tl, "topk") else (False,):
        for block_t in (1, 4):
            got = bench.sorted_key_topk(logits.to(TRITON_DEVICE), 5, block_t, 1, use_topk).cpu()
            assert torch.equal(got, sorted_ids(logits, 5)), (use_topk, block_t)


# ------------------------------------------------------------------------------------------------------------
# route(method="fused"): the same kernel also weighs the chosen experts
# ------------------------------------------------------------------------------------------------------------

def _both_routes(logits: torch.Tensor, top_k: int, **kwargs):
    """(weights, ids, d logits) of the PyTorch route and of the fused one, for the same upstream gradient. The fused
    route's backward is the PyTorch ops' here (``backward="torch"``; the kernel's, the default on CUDA, is checked
    against an fp64 oracle in test_router_topk_backward.py)."""
    import mok

    upstream = torch.randn(logits.shape[0], top_k, generator=torch.Generator().manual_seed(7)).to(logits.device)
    found = []
    for method in ("torch", "fused"):
        leaf = logits.detach().clone().requires_grad_(True)
        weights, ids = mok.route(leaf, top_k, method=method, backward="torch", **kwargs)
        (grad,) = torch.autograd.grad(weights, leaf, upstream)
        found.append((weights.detach(), ids, grad))
    return found


@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("tokens,experts,top_k,dtype", [(37, 33, 5, torch.float32), (9, 6, 1, torch.bfloat16),
                                                        (21, 128, 8, torch.bfloat16), (5, 7, 7, torch.float32)])
def test_fused_route_matches_the_torch_route(tokens, experts, top_k, dtype, scoring, renormalize):
    """The same ids; weights within fp32 rounding of the PyTorch ops' (the same mathematics, computed in another
    order); the gradient the PyTorch ops' own, bit for bit (the fused backward recomputes them)."""
    gen = torch.Generator().manual_seed(tokens + experts)
    logits = (torch.randn(tokens, experts, generator=gen) * 3).to(dtype).to(TRITON_DEVICE)
    (w_torch, ids_torch, g_torch), (w_fused, ids_fused, g_fused) = _both_routes(
        logits, top_k, scoring=scoring, renormalize=renormalize)
    assert ids_fused.dtype == torch.int32 and torch.equal(ids_fused, ids_torch)
    assert w_fused.dtype == torch.float32 and w_fused.shape == (tokens, top_k)
    assert float(((w_fused - w_torch).abs() / w_torch.abs()).max()) < 2e-6
    assert g_fused.dtype == dtype and torch.equal(g_fused, g_torch)


def test_fused_route_is_the_same_bits_for_any_split_of_the_tokens():
    """A token's weights depend on its own logits only: routing all tokens at once, or in two parts (as ranks of
    an expert-parallel group would), gives the same bits; so does routing again."""
    import mok

    logits = torch.randn(45, 64, generator=torch.Generator().manual_seed(5)).to(TRITON_DEVICE)
    whole, ids = mok.route(logits, 6, method="fused")
    parts = [mok.route(part, 6, method="fused") for part in (logits[:17], logits[17:])]
    again, _ = mok.route(logits, 6, method="fused")
    assert torch.equal(torch.cat([w for w, _ in parts]).view(torch.int32), whole.view(torch.int32))
    assert torch.equal(torch.cat([i for _, i in parts]), ids)
    assert torch.equal(again.view(torch.int32), whole.view(torch.int32))


def test_fused_route_weighs_minus_inf_logits_as_zero():
    """With check_inputs=False a row may hold -inf logits; a chosen one weighs 0, as in the PyTorch route."""
    logits = torch.randn(6, 10, generator=torch.Generator().manual_seed(6))
    logits[2, 3:] = float("-inf")  # three finite logits, top-5 takes two -inf ones
    for scoring in ("softmax", "sigmoid"):
        for renormalize in (True, False):
            (w_torch, ids_torch, _), (w_fused, ids_fused, _) = _both_routes(
                logits.to(TRITON_DEVICE), 5, scoring=scoring, renormalize=renormalize, check_inputs=False)
            assert torch.equal(ids_fused, ids_torch)
            assert w_fused[2, 3:].tolist() == [0.0, 0.0] and torch.allclose(w_fused, w_torch, rtol=2e-6, atol=0)


def test_fused_route_second_derivatives_are_the_torch_routes():
    """The fused backward differentiates the PyTorch ops at the saved logits with a graph when asked: a gradient of
    a gradient (autograd.grad with create_graph, as a gradient penalty takes it) equals the PyTorch route's."""
    import mok

    x0 = torch.randn(6, 10, generator=torch.Generator().manual_seed(9))
    upstream = torch.randn(6, 3, generator=torch.Generator().manual_seed(10))
    found = {}
    for method in ("torch", "fused"):
        x = x0.clone().to(TRITON_DEVICE).requires_grad_(True)
        weights, _ = mok.route(x, 3, method=method)
        (first,) = torch.autograd.grad((weights * upstream.to(x.device)).sum(), x, create_graph=True)
        (second,) = torch.autograd.grad(first.pow(2).sum(), x)
        found[method] = (first.detach(), second)
    assert torch.equal(found["fused"][0], found["torch"][0]) and torch.equal(found["fused"][1], found["torch"][1])
    assert float(found["torch"][1].abs().max()) > 0  # a second derivative there is to lose


def test_route_method_from_the_environment(monkeypatch):
    import mok

    logits = torch.randn(8, 12, generator=torch.Generator().manual_seed(8)).to(TRITON_DEVICE)
    fused, _ = mok.route(logits, 3, method="fused")
    monkeypatch.setenv("MOK_ROUTE", "fused")
    assert torch.equal(mok.route(logits, 3)[0].view(torch.int32), fused.view(torch.int32))
    monkeypatch.setenv("MOK_ROUTE", "sorted")
    with pytest.raises(ValueError, match="MOK_ROUTE"):
        mok.route(logits, 3)


def test_auto_route_is_the_torch_route_off_cuda(monkeypatch):
    """The default (``auto``) takes the kernel for CUDA logits only: CPU logits route by the PyTorch ops, also under
    the Triton interpreter (where ``MOK_ROUTE=fused`` would take the kernel)."""
    import mok

    monkeypatch.delenv("MOK_ROUTE", raising=False)
    logits = torch.randn(40, 12, generator=torch.Generator().manual_seed(12))
    want_weights, want_ids = mok.route(logits, 3, method="torch")
    for got_weights, got_ids in (mok.route(logits, 3), mok.route(logits, 3, method="auto")):
        assert torch.equal(got_ids, want_ids)
        assert torch.equal(got_weights.view(torch.int32), want_weights.view(torch.int32))


@pytest.mark.gpu
def test_gpu_auto_route_is_the_fused_route_for_its_dtypes(monkeypatch):
    """On CUDA the default is the fused kernel for bf16, fp16 and fp32 logits (bit for bit), and the PyTorch ops for
    fp64 ones (auto keeps the kernel to the dtypes whose fp32 scores are exact widenings)."""
    import mok

    monkeypatch.delenv("MOK_ROUTE", raising=False)
    logits = torch.randn(3000, 64, generator=torch.Generator().manual_seed(13)).cuda()
    for dtype, want_method in ((torch.bfloat16, "fused"), (torch.float16, "fused"), (torch.float32, "fused"),
                               (torch.float64, "torch")):
        typed = logits.to(dtype)
        want_weights, want_ids = mok.route(typed, 8, method=want_method)
        got_weights, got_ids = mok.route(typed, 8)
        assert torch.equal(got_ids, want_ids), dtype
        assert torch.equal(got_weights.view(torch.int32), want_weights.view(torch.int32)), dtype


def test_fused_route_from_the_environment_falls_back_where_the_kernel_cannot_run(monkeypatch):
    """MOK_ROUTE=fused is a preference: past the kernel's expert limit the PyTorch route runs (the same ids); asked
    for outright (method="fused") the kernel's refusal is raised."""
    import mok
    from mok.triton_ref.router_topk import MAX_EXPERTS

    wide = torch.randn(2, MAX_EXPERTS + 1, generator=torch.Generator().manual_seed(11)).to(TRITON_DEVICE)
    monkeypatch.setenv("MOK_ROUTE", "fused")
    weights, ids = mok.route(wide, 2)
    want_weights, want_ids = mok.route(wide, 2, method="torch")
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_weights)
    with pytest.raises(ValueError, match=f"at most {MAX_EXPERTS} experts"):
        mok.route(wide, 2, method="fused")


@pytest.mark.gpu
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid"])
@pytest.mark.parametrize("renormalize", [True, False])
@pytest.mark.parametrize("tokens,experts,top_k", [(20480, 8, 1), (32768, 256, 16), (4096, 384, 8), (999, 6, 2)])
def test_gpu_fused_route_matches_the_torch_route(tokens, experts, top_k, scoring, renormalize):
    """On the GPU, at the bench's routing shapes (bf16 logits: many ties), every scoring: the same ids, weights within
    a few fp32 roundings (Triton's exp is ex2.approx on the GPU), the PyTorch gradient bit for bit, the same bits on a
    second call and for the tokens routed from row 1 on (every row at another place in its program's tile)."""
    import mok

    logits = torch.randn(tokens, experts, generator=torch.Generator().manual_seed(top_k)).to(torch.bfloat16).cuda()
    kwargs = dict(scoring=scoring, renormalize=renormalize)
    (w_torch, ids_torch, g_torch), (w_fused, ids_fused, g_fused) = _both_routes(logits, top_k, **kwargs)
    assert torch.equal(ids_fused, ids_torch)
    assert float(((w_fused - w_torch).abs() / w_torch.abs()).max()) < 1e-5
    assert torch.equal(g_fused, g_torch)
    again, _ = mok.route(logits, top_k, method="fused", **kwargs)
    assert torch.equal(again.view(torch.int32), w_fused.view(torch.int32))
    shifted, shifted_ids = mok.route(logits[1:], top_k, method="fused", **kwargs)
    assert torch.equal(shifted.view(torch.int32), w_fused[1:].view(torch.int32))
    assert torch.equal(shifted_ids, ids_fused[1:])


def test_route_bench_says_it_needs_a_gpu():
    """experiments/route_bench.py (torch against fused routing) imports on the CPU and stops
    with a clear message there."""
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU test below runs the script")
    bench = load_experiment("route_bench.py")
    assert set(bench.DEFAULT_SHAPES) <= set(load_experiment("cuda_breakdown.py").SHAPES)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        bench.main(["--shapes", "anchor-1"])


@pytest.mark.gpu
def test_gpu_route_bench_runs(capsys):
    load_experiment("route_bench.py").main(["--shapes", "kimi-k2.7/ep64", "--iters", "3"])
    line = [row for row in capsys.readouterr().out.splitlines() if row.startswith("kimi")][0]
    assert " same " in line, line
