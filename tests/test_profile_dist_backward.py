"""experiments/profile_dist_backward.py (the distributed backward profiled per backend): it imports without a GPU
and says what it needs there; on GPUs it runs under torchrun (round 27's call 7 on two H200s)."""

from __future__ import annotations

import pytest
import torch

from conftest import load_experiment


def test_says_it_needs_gpus():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script runs under torchrun there")
    with pytest.raises(SystemExit, match="needs CUDA GPUs"):
        load_experiment("profile_dist_backward.py").main(["--model", "qwen3.5-397b"])
