"""The ring token buffer: every row once per direction for any ring size; replay only what was overwritten."""

import pytest
import torch

from mok.ring import RingBuffer, RingPlan, plan_ring


@pytest.mark.parametrize("rows,mb,ring", [(0, 16, 16), (16, 16, 16), (100, 16, 32), (256, 32, 64), (96, 32, None)])
def test_rows_covered_once_each_direction(rows, mb, ring):
    plan = plan_ring(rows, mb, ring)
    for order in (plan.forward_order(), plan.backward_order()):
        covered = []
        for i in order:
            start, end = plan.window(i)
            assert end - start <= mb
            covered.extend(range(start, end))
        assert sorted(covered) == list(range(rows))


def test_backward_replays_exactly_the_overwritten_minibatches():
    plan = RingPlan(rows=10 * 16, minibatch_rows=16, ring_rows=48)  # 10 minibatches, 3 slots
    ring = RingBuffer(plan, {"x": (4, torch.float32)}, torch.device("cpu"))
    for i in plan.forward_order():
        ring.claim(i)
    replayed = []
    for i in plan.backward_order():
        if not ring.holds(i):
            replayed.append(i)
            ring.claim(i)
        assert plan.resident_after_forward(i) == (i not in replayed)
    assert replayed == list(range(6, -1, -1))


def test_ring_views_stay_inside_their_slot():
    plan = RingPlan(rows=70, minibatch_rows=16, ring_rows=32)
    ring = RingBuffer(plan, {"x": (2, torch.float32)}, torch.device("cpu"))
    last = plan.num_minibatches - 1
    assert ring.rows("x", last).shape[0] == 70 - 16 * last
    assert ring.rows("x", 2).data_ptr() == ring.rows("x", 0).data_ptr()  # slot 0 reused


def test_bad_ring_sizes():
    with pytest.raises(ValueError, match="multiple"):
        RingPlan(rows=10, minibatch_rows=16, ring_rows=24)
