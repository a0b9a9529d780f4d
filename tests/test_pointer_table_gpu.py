"""The Triton pipeline's peer pointer tables on the GPU (mok.triton_ref.pipeline.pointer_table): right addresses,
a cached table for equally spaced views reused only on the same device and stream, none while a CUDA graph is
captured, and uneven views never cached."""

from __future__ import annotations

import pytest
import torch

from mok.triton_ref import pipeline

pytestmark = pytest.mark.gpu


def addresses(table: torch.Tensor) -> list[int]:
    return table.cpu().tolist()


def test_spaced_views_get_their_addresses_and_a_cached_table():
    block = torch.empty(4, 96, device="cuda", dtype=torch.bfloat16)
    views = list(block.chunk(4))
    first = pipeline.pointer_table(views, block.device)
    assert addresses(first) == [v.data_ptr() for v in views]
    assert pipeline.pointer_table(list(block.chunk(4)), block.device) is first  # same views again: the cache
    halves = list(block.chunk(2))
    assert addresses(pipeline.pointer_table(halves, block.device)) == [v.data_ptr() for v in halves]


def test_another_stream_gets_its_own_table():
    block = torch.empty(2, 64, device="cuda")
    on_default = pipeline.pointer_table(list(block.chunk(2)), block.device)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = pipeline.pointer_table(list(block.chunk(2)), block.device)
    side.synchronize()
    assert on_side is not on_default
    assert addresses(on_side) == addresses(on_default)


def test_uneven_views_are_right_and_never_cached():
    block = torch.empty(100, device="cuda")
    views = [block[0:10], block[10:40], block[40:100]]  # spacings of 10 and 30 elements
    first = pipeline.pointer_table(views, block.device)
    assert addresses(first) == [v.data_ptr() for v in views]
    assert pipeline.pointer_table(views, block.device) is not first


def test_no_views_give_an_empty_table():
    assert pipeline.pointer_table([], torch.device("cuda")).numel() == 0


def test_no_table_is_cached_while_a_graph_is_captured(monkeypatch):
    """During a capture the table's copy would run only at replay, so the cache is neither read nor written (the
    capture itself is stood in for: whether a pinned copy can be captured is torch's business, not this cache's)."""
    block = torch.empty(3, 32, device="cuda")
    views = list(block.chunk(3))
    cached = pipeline.pointer_table(views, block.device)  # in the cache before the "capture"
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    before = set(pipeline._SPACED_TABLES)
    table = pipeline.pointer_table(views, block.device)
    assert table is not cached
    assert set(pipeline._SPACED_TABLES) == before
    assert addresses(table) == [v.data_ptr() for v in views]
