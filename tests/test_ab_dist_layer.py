"""experiments/ab_dist_layer.py (the distributed layer under two settings of mok's switches, under torchrun): its
parsing, checked without a GPU."""

from __future__ import annotations

import pytest
import torch

from conftest import load_experiment


def test_refuses_equal_sides_and_non_mok_switches():
    script = load_experiment("ab_dist_layer.py")
    with pytest.raises(SystemExit):  # argparse's error: the two sides must differ
        script.main(["--env-a", "MOK_PULL_ORDER=row", "--env-b", "MOK_PULL_ORDER=row"])
    with pytest.raises(ValueError, match="MOK_NAME=VALUE"):
        script.main(["--env-a", "CUDA_VISIBLE_DEVICES=1", "--env-b", "MOK_PULL_ORDER=row"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message without a GPU")
def test_says_it_needs_gpus():
    script = load_experiment("ab_dist_layer.py")
    with pytest.raises(SystemExit, match="needs CUDA GPUs"):
        script.main(["--env-a", "MOK_PULL_ORDER=row", "--env-b", "MOK_PULL_ORDER=token"])
