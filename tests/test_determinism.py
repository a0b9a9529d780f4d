"""Bitwise determinism of the reference backend: repeated runs, EP 1/2/4/8, ring sizes; output and gradients."""

import pytest
import torch

from mok import MoKConfig

from conftest import OUTPUT_NAMES, assert_bitwise_equal, make_problem, run_layer

TILE = 16


@pytest.fixture(scope="module", params=[torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def problem(request):
    return make_problem(64, 32, 16, 8, 2, dtype=request.param, seed=11, skew=1.0)


@pytest.fixture(scope="module")
def baseline(problem):
    return run_layer("reference", problem, config=MoKConfig(expert_padding=TILE, minibatch_rows=32))


def test_repeated_runs_identical(problem, baseline):
    again = run_layer("reference", problem, config=MoKConfig(expert_padding=TILE, minibatch_rows=32))
    for name, a, b in zip(OUTPUT_NAMES, again, baseline):
        assert_bitwise_equal(a, b, name)


@pytest.mark.parametrize("ep_size", [2, 4, 8])
def test_identical_across_ep_degrees(problem, baseline, ep_size):
    got = run_layer("reference", problem, ep_size=ep_size, config=MoKConfig(expert_padding=TILE, minibatch_rows=32))
    for name, a, b in zip(OUTPUT_NAMES, got, baseline):
        assert_bitwise_equal(a, b, f"{name} at EP {ep_size}")


@pytest.mark.parametrize("minibatch,ring", [(16, 16), (16, 48), (48, 96), (128, None)])
@pytest.mark.parametrize("ep_size", [1, 4])
def test_identical_across_ring_sizes(problem, baseline, minibatch, ring, ep_size):
    config = MoKConfig(expert_padding=TILE, minibatch_rows=minibatch, ring_rows=ring)
    got = run_layer("reference", problem, ep_size=ep_size, config=config)
    for name, a, b in zip(OUTPUT_NAMES, got, baseline):
        assert_bitwise_equal(a, b, f"{name} (minibatch {minibatch}, ring {ring}, EP {ep_size})")


def test_bit_comparison_sees_signed_zero():
    assert torch.equal(torch.tensor([0.0]), torch.tensor([-0.0]))  # value equality misses it ...
    with pytest.raises(AssertionError):
        assert_bitwise_equal(torch.tensor([0.0]), torch.tensor([-0.0]))  # ... bit equality does not
