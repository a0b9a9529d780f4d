"""Push vs pull row-transfer kernels (mok/triton_ref/push_pull.py) under the Triton interpreter on a CPU.

Both directions must move exactly the same bytes to exactly the same places, bit for bit, and agree with the
PyTorch semantics of :mod:`mok.transfers`; padding rows must stay untouched; signalling must count every row.
"""

from __future__ import annotations

import os

import pytest
import torch

from conftest import HAS_CUDA, bits

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined

import mok  # noqa: E402
from mok.comm import EmulatedPeers  # noqa: E402
from mok.schedule import build_schedule  # noqa: E402
from mok.transfers import pull_rows, push_rows  # noqa: E402

push_pull = pytest.importorskip("mok.triton_ref.push_pull")
pytestmark = pytest.mark.skipif(not HAS_CUDA and os.environ.get("TRITON_INTERPRET") != "1",
                                reason="needs a GPU or TRITON_INTERPRET=1")

DEVICE = "cuda" if HAS_CUDA else "cpu"


def make_case(ranks, tokens_per_rank=8, hidden=32, experts=6, top_k=2, tile=4, skew=0.0, seed=0):
    """A routing over ``ranks`` emulated ranks, its schedule and plan, and random source buffers."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(ranks * tokens_per_rank, experts, generator=gen)
    logits -= skew * torch.arange(experts, dtype=torch.float32)  # skew > 0: hot low experts, empty high ones
    _, ids = mok.route(logits.to(DEVICE), top_k)
    schedule = build_schedule(ids, experts, ranks, tile)
    peers = EmulatedPeers(ranks, DEVICE)
    x = peers.buffer("x", (tokens_per_rank, hidden), torch.bfloat16)
    y = peers.buffer("y", (schedule.capacity, hidden), torch.bfloat16)
    for r in range(ranks):
        x[r].copy_(torch.randn(tokens_per_rank, hidden, generator=gen))
        y[r].copy_(torch.randn(schedule.capacity, hidden, generator=gen))
    return schedule, push_pull.PushPullPlan(schedule), peers, x, y


def poisoned(peers, name, shape):
    buf = peers.buffer(name, shape, torch.bfloat16)
    for view in buf.views:
        view.fill_(float("nan"))  # unwritten elements stay NaN
    return buf


CASES = [pytest.param(2, 0.0, id="2ranks-uniform"), pytest.param(3, 1.5, id="3ranks-skewed")]


@pytest.mark.parametrize("ranks,skew", CASES)
def test_dispatch_push_and_pull_move_the_same_bytes_as_transfers(ranks, skew):
    schedule, plan, peers, x, _ = make_case(ranks, skew=skew)
    hidden = x.shape[-1]
    got = {}
    for direction in ("pull", "push"):
        recv = poisoned(peers, f"recv_{direction}", (schedule.capacity, hidden))
        plan.dispatch(x, recv, direction)
        got[direction] = recv
    for r in range(ranks):
        real = schedule.src_rank[r] >= 0
        want = torch.empty(schedule.capacity, hidden, dtype=torch.bfloat16, device=DEVICE)
        pull_rows(schedule.rank(r), 0, schedule.capacity, x, want, by_token=True)
        assert torch.equal(bits(got["pull"][r]), bits(got["push"][r])), f"rank {r}: push != pull"
        assert torch.equal(bits(got["pull"][r][real]), bits(want[real])), f"rank {r}: != mok.transfers.pull_rows"
        assert torch.isnan(got["push"][r][~real].float()).all(), "padding rows must not be written"
    assert int((schedule.src_rank >= 0).sum()) == plan.real_rows == ranks * 8 * 2


@pytest.mark.parametrize("ranks,skew", CASES)
def test_combine_push_and_pull_move_the_same_bytes_as_transfers(ranks, skew):
    schedule, plan, peers, _, y = make_case(ranks, skew=skew, seed=1)
    hidden = y.shape[-1]
    slot_shape = (schedule.slots_per_rank, hidden)
    want = poisoned(peers, "want", slot_shape)
    for r in range(ranks):
        push_rows(schedule.rank(r), 0, schedule.capacity, y[r], want)
    for direction in ("pull", "push"):
        slots = poisoned(peers, f"slots_{direction}", slot_shape)
        plan.combine(y, slots, direction)
        for r in range(ranks):
            assert not torch.isnan(slots[r].float()).any(), f"{direction}: a slot was never written"
            assert torch.equal(bits(slots[r]), bits(want[r])), f"{direction} rank {r}: != mok.transfers.push_rows"


@pytest.mark.parametrize("direction", ["pull", "push"])
def test_signalling_counts_every_row_and_keeps_the_data(direction):
    ranks = 3
    schedule, plan, peers, x, y = make_case(ranks, skew=1.0, seed=2)
    hidden = x.shape[-1]
    plain = poisoned(peers, "plain", (schedule.capacity, hidden))
    plan.dispatch(x, plain, direction)
    signal = push_pull.SignalState.create(ranks, DEVICE)
    signalled = poisoned(peers, "signalled", (schedule.capacity, hidden))
    plan.dispatch(x, signalled, direction, signal=signal)
    plan.dispatch(x, signalled, direction, signal=signal)  # second epoch: counters keep growing, no reset
    signal.check()
    for r in range(ranks):
        assert torch.equal(bits(plain[r]), bits(signalled[r]))
    if direction == "push":
        assert torch.equal(signal.arrivals.cpu(), 2 * schedule.segment_counts.sum(1).to(torch.int64).cpu())
        assert int(signal.ready.sum()) == 0
    else:
        assert signal.ready.tolist() == [2] * ranks and int(signal.arrivals.sum()) == 0

    # Signalling alone moves no data but still completes every wait.
    untouched = poisoned(peers, "untouched", (schedule.capacity, hidden))
    slots_signal = push_pull.SignalState.create(ranks, DEVICE)
    plan.dispatch(x, untouched, direction, signal=slots_signal, move_data=False)
    plan.combine(y, poisoned(peers, "slots", (schedule.slots_per_rank, hidden)), direction,
                 signal=push_pull.SignalState.create(ranks, DEVICE), move_data=False)
    slots_signal.check()
    assert all(torch.isnan(v.float()).all() for v in untouched.views)


def test_one_signal_state_serves_dispatch_and_combine():
    """Dispatch and combine expect different row counts per rank (skewed routing); sharing one state must still
    complete every wait (a target of epoch * expected did not: found on the H200, 2026-11-29)."""
    ranks = 3
    schedule, plan, peers, x, y = make_case(ranks, skew=1.5, seed=4)
    hidden = x.shape[-1]
    signal = push_pull.SignalState.create(ranks, DEVICE)
    plan.dispatch(x, poisoned(peers, "recv", (schedule.capacity, hidden)), "push", signal=signal)
    plan.combine(y, poisoned(peers, "slots", (schedule.slots_per_rank, hidden)), "push", signal=signal)
    signal.check()
    per_expert_rank = schedule.segment_counts.sum(1).to(torch.int64).cpu()
    per_source_rank = torch.full((ranks,), schedule.slots_per_rank, dtype=torch.int64)
    assert not torch.equal(per_expert_rank, per_source_rank), "the case must skew the two transfers apart"
    assert torch.equal(signal.arrivals.cpu(), per_expert_rank + per_source_rank)


def test_transfer_rows_rejects_bad_arguments():
    schedule, plan, peers, x, _ = make_case(2)
    recv = peers.buffer("recv", (schedule.capacity, x.shape[-1]), torch.bfloat16)
    with pytest.raises(ValueError, match="direction"):
        plan.dispatch(x, recv, "sideways")
    other = peers.buffer("other", (schedule.capacity, x.shape[-1]), torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        push_pull.transfer_rows(other, x, plan.expert_rank_table, plan.expert_row_table, direction="pull")
    with pytest.raises(ValueError, match="expected"):
        push_pull.transfer_rows(x, recv, plan.source_rank_table, plan.source_row_table, direction="push",
                                own_div=2, signal=push_pull.SignalState.create(2, DEVICE))


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [7168, 1000], ids=["H7168", "H1000-unaligned-rows"])
def test_gpu_push_and_pull_agree_at_a_real_size(hidden):
    """The compiled kernels (16-byte vectors, release/acquire atomics) at 8 ranks, Kimi-like routing."""
    ranks, t_local, top_k = 8, 256, 8
    schedule, plan, peers, x, y = make_case(ranks, tokens_per_rank=t_local, hidden=hidden, experts=64, top_k=top_k,
                                            tile=128, skew=0.05, seed=3)
    want_slots = poisoned(peers, "want_slots", (schedule.slots_per_rank, hidden))
    for r in range(ranks):
        push_rows(schedule.rank(r), 0, schedule.capacity, y[r], want_slots)
    for direction in ("pull", "push"):
        for signal in (None, push_pull.SignalState.create(ranks, DEVICE)):
            recv = poisoned(peers, "recv", (schedule.capacity, hidden))
            slots = poisoned(peers, "slots", (schedule.slots_per_rank, hidden))
            plan.dispatch(x, recv, direction, signal=signal)
            plan.combine(y, slots, direction, signal=signal)
            if signal is not None:
                signal.check()
            for r in range(ranks):
                real = schedule.src_rank[r] >= 0
                want = torch.empty(schedule.capacity, hidden, dtype=torch.bfloat16, device=DEVICE)
                pull_rows(schedule.rank(r), 0, schedule.capacity, x, want, by_token=True)
                assert torch.equal(bits(recv[r][real]), bits(want[real])), (direction, signal is not None, r)
                assert torch.isnan(recv[r][~real].float()).all()
                assert torch.equal(bits(slots[r]), bits(want_slots[r])), (direction, signal is not None, r)
