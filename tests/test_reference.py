"""The reference backend against the naive per-expert loop and an fp64 oracle: output and every gradient."""

import pytest
import torch

from mok import MoKConfig
from mok.config import TEST_SHAPES

from conftest import OUTPUT_NAMES, make_problem, rel_err, run_layer

SMALL = MoKConfig(expert_padding=16, minibatch_rows=32, ring_rows=64)


def oracle(problem):
    """fp64 naive loop through autograd."""
    return run_layer("oracle", problem)


@pytest.mark.parametrize("shape", TEST_SHAPES, ids=lambda s: s.name)
def test_fp32_matches_naive(shape):
    problem = make_problem(shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k, seed=1)
    got = run_layer("reference", problem, config=SMALL)
    want = run_layer("naive", problem)
    exact = oracle(problem)
    for name, g, w, e in zip(OUTPUT_NAMES, got, want, exact):
        assert rel_err(g, w) < 2e-6, name
        assert rel_err(g, e) < 2e-6, name


@pytest.mark.parametrize("shape", TEST_SHAPES[:2], ids=lambda s: s.name)
def test_bf16_matches_oracle(shape):
    problem = make_problem(shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k,
                           dtype=torch.bfloat16, seed=2)  # router weights stay fp32 (mok.route's)
    got = run_layer("reference", problem, config=SMALL)
    naive = run_layer("naive", problem)
    exact = oracle(problem)
    for name, g, n, e in zip(OUTPUT_NAMES, got, naive, exact):
        assert g.dtype == n.dtype, name
        err, naive_err = rel_err(g, e), rel_err(n, e)
        assert err < 2e-2, f"{name}: {err}"
        # Within a small factor of what plain PyTorch bf16 gets on the same problem.
        assert err < 3 * naive_err + 2e-3, f"{name}: {err} vs naive {naive_err}"


def test_outputs_are_all_written_and_finite():
    problem = make_problem(64, 32, 16, 8, 2, seed=3, skew=4.0)  # skewed: empty experts, one hot expert
    for t in run_layer("reference", problem, config=SMALL):
        assert bool(torch.isfinite(t).all())


def test_replay_matches_no_replay():
    """A ring far smaller than the schedule (heavy replay) computes the same numbers as a ring holding it all."""
    problem = make_problem(96, 32, 16, 4, 2, seed=4)
    small_ring = run_layer("reference", problem, config=MoKConfig(expert_padding=16, minibatch_rows=16, ring_rows=16))
    no_replay = run_layer("reference", problem, config=MoKConfig(expert_padding=16, minibatch_rows=16))
    for name, a, b in zip(OUTPUT_NAMES, small_ring, no_replay):
        assert torch.equal(a, b), name


def test_zero_router_weight_gives_finite_router_gradient():
    """dw = <W_down^T dO, h> never divides by w: a zero weight still gets its true gradient."""
    problem = make_problem(32, 16, 8, 4, 2, seed=6)
    problem[2] = problem[2].clone()
    problem[2][:, 1] = 0.0
    got = run_layer("reference", problem, config=SMALL)
    exact = oracle(problem)
    assert rel_err(got[2], exact[2]) < 2e-6
