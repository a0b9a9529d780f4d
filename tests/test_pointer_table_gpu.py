"""Peer pointer tables on the GPU (mok.comm.pointer_tables): right addresses, a cached table for equally spaced
views (and for stacked rank buffers) reused only on the same device and stream, none while a CUDA graph is
captured, and uneven views never cached."""

from __future__ import annotations

import pytest
import torch

from mok.comm import pointer_tables
from mok.comm.pointer_tables import pointer_table, stacked_pointer_table

pytestmark = pytest.mark.gpu


def addresses(table: torch.Tensor) -> list[int]:
    return table.cpu().tolist()


def test_spaced_views_get_their_addresses_and_a_cached_table():
    block = torch.empty(4, 96, device="cuda", dtype=torch.bfloat16)
    views = list(block.chunk(4))
    first = pointer_table(views, block.device)
    assert addresses(first) == [v.data_ptr() for v in views]
    assert pointer_table(list(block.chunk(4)), block.device) is first  # same views again: the cache
    halves = list(block.chunk(2))
    assert addresses(pointer_table(halves, block.device)) == [v.data_ptr() for v in halves]


def test_another_stream_gets_its_own_table():
    block = torch.empty(2, 64, device="cuda")
    on_default = pointer_table(list(block.chunk(2)), block.device)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        on_side = pointer_table(list(block.chunk(2)), block.device)
    side.synchronize()
    assert on_side is not on_default
    assert addresses(on_side) == addresses(on_default)


def test_uneven_views_are_right_and_never_cached():
    block = torch.empty(100, device="cuda")
    views = [block[0:10], block[10:40], block[40:100]]  # spacings of 10 and 30 elements
    first = pointer_table(views, block.device)
    assert addresses(first) == [v.data_ptr() for v in views]
    assert pointer_table(views, block.device) is not first


def test_no_views_give_an_empty_table():
    assert pointer_table([], torch.device("cuda")).numel() == 0


def test_no_table_is_cached_while_a_graph_is_captured(monkeypatch):
    """During a capture the table is made only at replay, so the cache is neither read nor written (the capture
    itself is stood in for: whether the table's kernels can be captured is torch's business, not this cache's)."""
    block = torch.empty(3, 32, device="cuda")
    views = list(block.chunk(3))
    cached = pointer_table(views, block.device)  # in the cache before the "capture"
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    before = set(pointer_tables._SPACED_TABLES)
    table = pointer_table(views, block.device)
    assert table is not cached
    assert set(pointer_tables._SPACED_TABLES) == before
    assert addresses(table) == [v.data_ptr() for v in views]


def test_stacked_rank_buffers_get_their_addresses_and_a_cached_table():
    stacked = torch.empty(4, 3, 8, device="cuda", dtype=torch.bfloat16)
    first = stacked_pointer_table(stacked)
    assert first.dtype == torch.int64 and first.device == stacked.device
    assert addresses(first) == [stacked[r].data_ptr() for r in range(4)]
    assert stacked_pointer_table(stacked) is first  # same buffers, same stream: the cache
    strided = torch.empty(4, 5, device="cuda")[:, 1:3]  # dim-0 stride 5 elements, not the default 2
    assert addresses(stacked_pointer_table(strided)) == [strided[r].data_ptr() for r in range(4)]


def test_no_stacked_table_is_cached_while_a_graph_is_captured(monkeypatch):
    stacked = torch.empty(3, 16, device="cuda")
    cached = stacked_pointer_table(stacked)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    before = set(pointer_tables._SPACED_TABLES)
    table = stacked_pointer_table(stacked)
    assert table is not cached
    assert set(pointer_tables._SPACED_TABLES) == before
    assert addresses(table) == [stacked[r].data_ptr() for r in range(3)]
