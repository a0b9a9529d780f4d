"""Peer pointer tables (mok.comm.pointer_tables) on CPU tensors: every entry is its rank's buffer address, for
equally spaced, unevenly spaced, reversed and strided buffers. The GPU-only part (the per-stream cache, nothing
cached during a CUDA graph capture) is in tests/test_pointer_table_gpu.py."""

from __future__ import annotations

import pytest
import torch

from mok.comm import pointer_tables
from mok.comm.pointer_tables import pointer_table, spaced_pointer_table, stacked_pointer_table

CPU = torch.device("cpu")


def test_spaced_table_counts_from_its_base():
    base = 0x7F12_3456_7000  # a 47-bit address: needs int64, not int32
    table = spaced_pointer_table(base, 4096, 5, CPU)
    assert table.dtype == torch.int64 and table.device == CPU
    assert table.tolist() == [base + r * 4096 for r in range(5)]
    assert spaced_pointer_table(base, -256, 3, CPU).tolist() == [base, base - 256, base - 512]
    assert spaced_pointer_table(base, 64, 0, CPU).numel() == 0


@pytest.mark.parametrize("views_of", [
    lambda block: list(block.chunk(4)),                      # equally spaced
    lambda block: [block[0:1], block[1:4], block[4:8]],       # uneven: spacings of 1 and 3 rows
    lambda block: list(block.chunk(4))[::-1],                 # equally spaced, descending
    lambda block: [block[5]],                                 # one view
    lambda block: [block[2], block[2], block[6]],             # a repeated address, then a jump
], ids=["even", "uneven", "reversed", "one", "repeated"])
def test_list_table_holds_each_views_address(views_of):
    block = torch.empty(8, 24, dtype=torch.bfloat16)
    views = views_of(block)
    table = pointer_table(views, CPU)
    assert table.dtype == torch.int64 and table.device == CPU
    assert table.tolist() == [v.data_ptr() for v in views]


def test_no_views_give_an_empty_table():
    table = pointer_table([], CPU)
    assert table.dtype == torch.int64 and table.shape == (0,)


@pytest.mark.parametrize("make", [
    lambda: torch.empty(4, 3, 8, dtype=torch.bfloat16),       # contiguous
    lambda: torch.empty(4, 7, dtype=torch.float32)[:, 2:5],   # dim-0 stride 7, not the view's 3
    lambda: torch.empty(6, 5, dtype=torch.float64)[1::2],     # every other row, from row 1
    lambda: torch.empty(5, 4, dtype=torch.int32).t(),         # [4, 5] with dim-0 stride 1
], ids=["contiguous", "column-slice", "row-step", "transposed"])
def test_stacked_table_holds_each_ranks_address(make):
    stacked = make()
    table = stacked_pointer_table(stacked)
    assert table.dtype == torch.int64 and table.device == CPU
    assert table.tolist() == [stacked[r].data_ptr() for r in range(stacked.shape[0])]


def test_cpu_tables_are_fresh_and_never_cached():
    """Only GPU tables are cached (per device and stream); a CPU caller gets its own tensor every time."""
    stacked = torch.empty(3, 16)
    before = dict(pointer_tables._SPACED_TABLES)
    first = stacked_pointer_table(stacked)
    assert stacked_pointer_table(stacked) is not first
    assert pointer_table(list(stacked), CPU) is not pointer_table(list(stacked), CPU)
    assert set(pointer_tables._SPACED_TABLES) == set(before)


def test_workspace_rank_table_checks_the_rank_count():
    from mok.cuda.workspace import Sm90Workspace, WorkspaceKey
    key = WorkspaceKey(device="cpu", stream=0, num_ranks=2, tokens_per_rank=4, top_k=1, hidden=8, intermediate=8,
                       capacity=128, minibatch_rows=128, ring_rows=128, fuse_top1=True)
    workspace = Sm90Workspace(key)
    out = torch.empty(2, 4, 8, dtype=torch.bfloat16)
    assert workspace.rank_pointer_table(out).tolist() == [out[0].data_ptr(), out[1].data_ptr()]
    with pytest.raises(ValueError, match="expected 2 rank buffers"):
        workspace.rank_pointer_table(torch.empty(3, 4, 8))
