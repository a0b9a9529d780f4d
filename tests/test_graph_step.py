"""experiments/graph_step.py (the bench's training step captured in a CUDA graph against the eager step): its bit
comparison and its message without a GPU; on the GPU, a small shape through both backends."""

from __future__ import annotations

import pytest
import torch

from conftest import load_experiment


def test_same_bits_tells_signed_zeros_and_missing_gradients_apart():
    script = load_experiment("graph_step.py")
    a = torch.tensor([0.0, 1.5], dtype=torch.bfloat16)
    assert script.same_bits(a, a.clone())
    assert not script.same_bits(a, torch.tensor([-0.0, 1.5], dtype=torch.bfloat16))  # == would call them equal
    assert not script.same_bits(a, a.float())
    assert script.same_bits(None, None) and not script.same_bits(a, None)


def test_load_set_writes_another_set_in_place():
    """The captured step reads set 0's tensors: load_set writes set 1's values into them (weights too where the
    problem rotates them), keeping their addresses."""
    from types import SimpleNamespace

    script = load_experiment("graph_step.py")
    for weight_sets in (1, 2):
        sets = [[torch.randn(4, 3) for _ in range(5)] for _ in range(2)]
        problem = SimpleNamespace(xs=[s[0] for s in sets], grads=[s[1] for s in sets],
                                  weights=[tuple(s[2:]) for s in sets][:weight_sets])
        before = [t.data_ptr() for t in [problem.xs[0], problem.grads[0], *problem.weights[0]]]
        script.load_set(problem, 1)
        assert [t.data_ptr() for t in [problem.xs[0], problem.grads[0], *problem.weights[0]]] == before
        assert torch.equal(problem.xs[0], sets[1][0]) and torch.equal(problem.grads[0], sets[1][1])
        assert all(torch.equal(w, sets[weight_sets - 1][2 + j]) for j, w in enumerate(problem.weights[0]))


def test_says_it_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the GPU test below runs the script")
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        load_experiment("graph_step.py").main(["anchor-1"])


@pytest.mark.gpu
def test_gpu_graph_step_runs(capsys):
    """Each backend either times its replay, with the eager step's gradients bit for bit on the captured inputs and
    on new ones, or says why its capture failed."""
    load_experiment("graph_step.py").main(["512:256:128:8:2", "--backends", "torch,cuda", "--rounds", "1",
                                           "--calls", "1"])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("custom-512x256x128x8x2")]
    assert len(lines) == 2, lines
    for line in lines:
        assert "capture failed" in line or line.rstrip().endswith("True, True"), line
