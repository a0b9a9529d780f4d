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
