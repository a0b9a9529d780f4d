"""The Triton kernels' tile configurations (mok.triton_ref._common): lookups are remembered, and an override (the
tuning experiments' way in) takes effect inside its block and is gone after it, although a lookup ran before."""

from __future__ import annotations

import torch

from mok.triton_ref import _common


def test_lookups_are_remembered_and_overrides_still_apply():
    args = ("down_dgrad_swiglu", torch.bfloat16, 128, 1024, 4096)
    first = _common.gemm_config(*args)
    assert _common.gemm_config(*args) is first  # remembered: the same object, no work
    wgrad = _common.wgrad_config(torch.bfloat16, 128, 1024, 4096)
    with _common.override_configs({"down_dgrad_swiglu": {"num_warps": 2}, "wgrad": {"num_stages": 1}}):
        inside = _common.gemm_config(*args)
        assert inside.num_warps == 2 and inside != first
        assert _common.wgrad_config(torch.bfloat16, 128, 1024, 4096).num_stages == 1
        assert _common.gemm_config(*args) is inside
    assert _common.gemm_config(*args) == first and _common.wgrad_config(torch.bfloat16, 128, 1024, 4096) == wgrad
    assert _common.gemm_config(kernel="down_dgrad_swiglu", dtype=torch.bfloat16, tile_rows=128, n=1024,
                               k=4096) == first  # keywords too


def test_host_integer_helpers_match_triton():
    import triton

    for n in range(0, 5000):
        assert _common.next_power_of_2(n) == triton.next_power_of_2(n)
        assert _common.cdiv(n, 7) == triton.cdiv(n, 7) and _common.cdiv(n, 128) == triton.cdiv(n, 128)


def test_short_reductions_take_their_own_default(monkeypatch):
    """dx's 128 x 128 blocks at K <= 2048 (round 28: 1.32x at anchor-2), its 128 x 256 blocks at deeper K; the
    general entry when no depth is given, and fp32 keeps its one entry. gemm_config picks by the reduction
    depth when not interpreting."""
    deepest, short = _common._GPU_BF16_SHORT_K["dx_dgrad"]
    general = _common.default_config("dx_dgrad", torch.bfloat16)
    assert short != general
    assert _common.default_config("dx_dgrad", torch.bfloat16, deepest) == short
    assert _common.default_config("dx_dgrad", torch.bfloat16, deepest + 1) == general
    assert _common.default_config("dx_dgrad", torch.float32, 64) == _common.default_config("dx_dgrad", torch.float32)
    assert _common.default_config("wgrad", torch.bfloat16, 64) == _common.default_config("wgrad", torch.bfloat16)
    monkeypatch.setattr(_common, "INTERPRETING", False)
    monkeypatch.setattr(_common, "_CONFIGS", {})
    assert _common.gemm_config("dx_dgrad", torch.bfloat16, 128, 4096, deepest).block_n == short.block_n
    assert _common.gemm_config("dx_dgrad", torch.bfloat16, 128, 4096, 4096).block_n == general.block_n
