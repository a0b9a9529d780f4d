"""The early-combine order (mok.cuda.schedule_tables.combine_order) against a brute-force reading of the schedule.

The megakernel trusts this order: a combine block placed in step s is summed once every rank's down tasks of
steps 0..s-1 (the last step: 0..s) are done, so each block's rows must all lie in those steps. Here each token's
ready step comes from the schedule's inverse map (dest_row), independently of combine_order's scatter.
"""
from __future__ import annotations

import math

import pytest
import torch

import mok
from mok.cuda.schedule_tables import COMBINE_BLOCK_TOKENS, KernelSchedule, combine_order

# (EP degree, tokens, top-k, experts, minibatch rows, skew)
CASES = [
    (1, 512, 4, 8, 256, 0.0),
    (2, 600, 4, 16, 256, 0.0),     # T_local not a multiple of the block
    (4, 1024, 2, 16, 384, 3.0),    # skewed: empty and hot experts
    (8, 1024, 8, 64, 128, 0.0),
    (1, 200, 2, 4, 1024, 0.0),     # one step: every block in the last (and only) step
]


def _schedule(ranks, tokens, top_k, experts, skew, seed):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(tokens, experts, generator=gen) - skew * torch.arange(experts, dtype=torch.float32)
    _, ids = mok.route(logits, top_k)
    return mok.build_schedule(ids, experts, ranks, tile=128)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "R{}-T{}-K{}-E{}-mb{}-skew{}".format(*c))
def test_combine_order_matches_brute_force(case):
    ranks, tokens, top_k, experts, minibatch_rows, skew = case
    sched = _schedule(ranks, tokens, top_k, experts, skew, seed=sum(case[:5]))
    order, offsets = combine_order(KernelSchedule.from_schedule(sched), minibatch_rows)
    t_local = tokens // ranks
    blocks = math.ceil(t_local / COMBINE_BLOCK_TOKENS)
    steps = math.ceil(sched.capacity / minibatch_rows)
    assert order.dtype == offsets.dtype == torch.int32
    assert order.shape == (ranks, t_local) and offsets.shape == (ranks, steps + 1)
    # The kernel's last step: the most minibatches any rank's rows in use fill.
    last = max(math.ceil(int(rows) / minibatch_rows) for rows in sched.segment_offsets[:, -1]) - 1
    for q in range(ranks):
        ready = [max(int(sched.dest_row[q, tok * top_k + k]) // minibatch_rows for k in range(top_k))
                 for tok in range(t_local)]
        assert order[q].tolist() == sorted(range(t_local), key=lambda tok: (ready[tok], tok))
        expected = [0] * steps
        for b in range(blocks):
            members = order[q, b * COMBINE_BLOCK_TOKENS:(b + 1) * COMBINE_BLOCK_TOKENS].tolist()
            expected[min(max(ready[tok] for tok in members) + 1, last)] += 1
        assert offsets[q].tolist() == [0] + torch.tensor(expected).cumsum(0).tolist()
        assert int(offsets[q, -1]) == blocks


def test_combine_order_places_many_blocks_before_the_last_step():
    """The point of the order: with many steps, many blocks are summed while GEMMs still run. At EP 1, 64
    experts, top-8 and minibatches of about a sixteenth of the rows (18 steps here), a token is ready before the
    last step unless one of its 8 rows lies in it; 59 of the 128 blocks are placed before it."""
    sched = _schedule(1, 2048, 8, 64, 0.0, seed=5)
    minibatch_rows = sched.segment_offsets[0, -1].item() // 16 // 128 * 128
    _, offsets = combine_order(KernelSchedule.from_schedule(sched), minibatch_rows)
    last = math.ceil(sched.segment_offsets[0, -1].item() / minibatch_rows) - 1
    early, total = int(offsets[0, last]), int(offsets[0, -1])
    assert 0.3 * total < early < total


def test_combine_order_rejects_a_minibatch_off_the_tile():
    sched = _schedule(1, 256, 2, 8, 0.0, seed=1)
    with pytest.raises(ValueError, match="multiple of the tile"):
        combine_order(KernelSchedule.from_schedule(sched), 100)


def test_combine_block_is_the_kernels_combine_task():
    """COMBINE_BLOCK_TOKENS mirrors Sm90Tiles::kCombineTokens (include/mok/workspace.cuh): the kernel cuts the
    order into blocks of its own size, so a different Python value would place blocks by the wrong last token."""
    import re
    from pathlib import Path

    from mok.cuda import schedule_tables

    header = (Path(schedule_tables.__file__).parent / "include/mok/workspace.cuh").read_text()
    assert int(re.search(r"kCombineTokens = (\d+);", header).group(1)) == COMBINE_BLOCK_TOKENS
