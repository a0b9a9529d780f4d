"""SM-wave arithmetic: MoK's 2,368 tokens on GB300, the H200 value, and pluggable policies."""

import pytest

from mok import MoKConfig, heuristics
from mok.config import MODELS


def test_reproduces_moks_2368_tokens_for_kimi_on_gb300():
    # Kimi K2.5 / K2.7 routed-expert geometry: hidden 7168, expert intermediate 2048.
    assert heuristics.two_wave_threshold(7168, 2048, heuristics.GB300) == pytest.approx(2368)


def test_h200_threshold():
    assert heuristics.two_wave_threshold(7168, 2048, heuristics.H200) == pytest.approx(2112)
    rows = heuristics.two_wave_policy(MODELS["kimi-k2.7"].layer(2048), heuristics.H200, MoKConfig())
    assert rows == 2176 and rows % 128 == 0  # 2112 rounded up to whole 128-row tiles


def test_default_policy_is_the_wave_rule_at_four_waves():
    """mok's default doubles MoK's rows per ring step (measured on the H200, round 36; heuristics' docstring)."""
    assert MoKConfig().policy == "four_wave"
    kimi_slice = MODELS["kimi-k2.7"].ep_slice(64)  # H 7168, I 2048: threshold 2,112 at two waves, 4,224 at four
    assert heuristics.minibatch_rows(kimi_slice, heuristics.H200, MoKConfig()) == 4224
    assert heuristics.minibatch_rows(kimi_slice, heuristics.H200, MoKConfig(policy="two_wave")) == 2176
    for spec in MODELS.values():  # four full waves of both GEMMs, never fewer tiles than the two-wave choice
        shape = spec.ep_slice(64)
        rows = heuristics.minibatch_rows(shape, heuristics.H200, MoKConfig())
        assert rows % 128 == 0 and rows >= heuristics.two_wave_policy(shape, heuristics.H200, MoKConfig())
        for n in (2 * spec.intermediate, spec.hidden):
            assert rows / heuristics.BLOCK_M * heuristics.column_tiles(n) >= 4 * heuristics.H200.num_sms


def test_threshold_gives_two_full_waves():
    for spec in MODELS.values():
        for dev in (heuristics.GB300, heuristics.H200):
            rows = heuristics.two_wave_threshold(spec.hidden, spec.intermediate, dev)
            for n in (2 * spec.intermediate, spec.hidden):
                tiles = rows / heuristics.BLOCK_M * heuristics.column_tiles(n)
                assert tiles >= 2 * dev.num_sms - 1e-9


def test_wave_helpers():
    assert heuristics.gemm_tiles(300, 512) == 3 * 2
    assert heuristics.waves(264, 132) == 2.0
    assert heuristics.wave_efficiency(133, 132) == pytest.approx(133 / 264)


def test_register_custom_policy():
    @heuristics.register_policy("fixed-512")
    def fixed(shape, device, config):
        return 512

    shape = MODELS["glm-5.2"].layer(2048)
    assert heuristics.minibatch_rows(shape, heuristics.H200, MoKConfig(policy="fixed-512")) == 512
    assert "fixed-512" in heuristics.policies()
    assert heuristics.minibatch_rows(shape, heuristics.H200, MoKConfig(minibatch_rows=256)) == 256


def test_bad_policy_output_and_unknown_policy():
    heuristics.register_policy("bad")(lambda shape, device, config: 100)
    with pytest.raises(ValueError, match="multiple of expert_padding"):
        heuristics.minibatch_rows(MODELS["glm-5.2"].layer(64), heuristics.H200, MoKConfig(policy="bad"))
    with pytest.raises(ValueError, match="unknown minibatch policy"):
        heuristics.get_policy("nope")
