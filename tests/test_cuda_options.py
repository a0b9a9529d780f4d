"""The megakernel backend's options, checked without a GPU (mok/cuda/backend.py)."""

from __future__ import annotations

import pytest

from mok.cuda.backend import GATHER_MAX_COLUMN_BLOCKS, default_variant, resolve_dispatch


def test_auto_dispatch_gathers_only_for_few_gate_up_column_blocks(monkeypatch):
    monkeypatch.delenv("MOK_CUDA_DISPATCH", raising=False)
    assert resolve_dispatch(None, 128 * GATHER_MAX_COLUMN_BLOCKS) == "gather"
    assert resolve_dispatch("auto", 128 * GATHER_MAX_COLUMN_BLOCKS + 64) == "ring"  # one more (partial) block
    assert resolve_dispatch("ring", 64) == "ring" and resolve_dispatch("gather", 4096) == "gather"


def test_dispatch_environment_and_bad_values(monkeypatch):
    monkeypatch.setenv("MOK_CUDA_DISPATCH", "gather")
    assert resolve_dispatch(None, 4096) == "gather"
    with pytest.raises(ValueError, match="dispatch must be one of"):
        resolve_dispatch("push", 256)


def test_default_variant_is_pipelined_unless_overridden(monkeypatch):
    monkeypatch.delenv("MOK_CUDA_VARIANT", raising=False)
    assert default_variant() == "pipelined"
    monkeypatch.setenv("MOK_CUDA_VARIANT", "simple")
    assert default_variant() == "simple"
