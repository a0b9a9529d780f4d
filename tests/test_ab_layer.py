"""experiments/ab_layer.py (the layer under two settings of the backend's environment switches): its parsing and its
switching of the environment, checked without a GPU."""

from __future__ import annotations

import os

import pytest

from conftest import load_experiment


def load_script():
    return load_experiment("ab_layer.py")


def test_parse_env_takes_mok_switches_only():
    script = load_script()
    assert script.parse_env(["MOK_CUDA_DOWN_TMA=0", "MOK_CUDA_DOWN_SPAN=auto"]) == {
        "MOK_CUDA_DOWN_TMA": "0", "MOK_CUDA_DOWN_SPAN": "auto"}
    assert script.parse_env(["MOK_X="]) == {"MOK_X": ""}
    for bad in ("MOK_CUDA_DOWN_TMA", "CUDA_VISIBLE_DEVICES=1", "MOK_A-B=1", "=1"):
        with pytest.raises(ValueError, match="MOK_NAME=VALUE"):
            script.parse_env([bad])


def test_environment_sets_one_side_and_restores_both(monkeypatch):
    script = load_script()
    monkeypatch.setenv("MOK_AB_TEST_KEPT", "outer")
    monkeypatch.delenv("MOK_AB_TEST_OTHER", raising=False)
    names = {"MOK_AB_TEST_KEPT", "MOK_AB_TEST_OTHER"}
    with script.environment({"MOK_AB_TEST_OTHER": "b"}, names):
        assert os.environ["MOK_AB_TEST_OTHER"] == "b"
        assert "MOK_AB_TEST_KEPT" not in os.environ  # the other side's switch is unset, not left at its value
    assert os.environ["MOK_AB_TEST_KEPT"] == "outer" and "MOK_AB_TEST_OTHER" not in os.environ
    with pytest.raises(RuntimeError):
        with script.environment({"MOK_AB_TEST_KEPT": "a"}, names):
            assert os.environ["MOK_AB_TEST_KEPT"] == "a"
            raise RuntimeError("restored even so")
    assert os.environ["MOK_AB_TEST_KEPT"] == "outer"


def test_sides_must_differ():
    script = load_script()
    with pytest.raises(SystemExit):
        script.main(["--env-a", "MOK_CUDA_DOWN_TMA=0", "--env-b", "MOK_CUDA_DOWN_TMA=0", "anchor-2"])


def test_router_options_need_the_router():
    script = load_script()
    for extra in (["--backward"], ["--router-weights", "fp32"]):
        with pytest.raises(SystemExit) as stopped:
            script.main(["--env-a", "MOK_ROUTER=torch", "--env-b", "MOK_ROUTER=kernel", *extra, "anchor-2"])
        assert stopped.value.code == 2  # argparse's refusal, not a GPU check


def test_parse_config_gives_a_mokconfig_and_refuses_other_keys():
    from mok import MoKConfig

    script = load_script()
    assert script.parse_config(["policy=two_wave", "minibatch_rows=4352"]) == MoKConfig(policy="two_wave",
                                                                                         minibatch_rows=4352)
    assert script.parse_config([]) == MoKConfig()
    with pytest.raises(ValueError, match="not MoKConfig fields"):
        script.parse_config(["down_span=4"])


def test_sides_that_differ_in_nothing_are_refused_with_configs_too():
    script = load_script()
    with pytest.raises(SystemExit) as stopped:
        script.main(["--config-a", "policy=four_wave", "--config-b", "policy=four_wave", "anchor-2"])
    assert stopped.value.code == 2
    with pytest.raises(SystemExit):  # the default config is four_wave: naming it on one side changes nothing
        script.main(["--config-b", "policy=four_wave", "anchor-2"])
