"""The schedule table: every (token, k) exactly once, padded segments, one table for all four transfers."""

import pytest
import torch

from mok.comm import EmulatedPeers
from mok.schedule import ScheduleCapacityError, build_schedule, worst_case_capacity
from mok.transfers import pull_rows, push_rows

from conftest import make_problem


def random_ids(tokens, experts, top_k, seed=0, skew=0.0):
    gen = torch.Generator().manual_seed(seed)
    scores = torch.rand(tokens, experts, generator=gen) - skew * torch.arange(experts) / experts
    return torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :top_k].to(torch.int32)


@pytest.mark.parametrize("ep_size", [1, 2, 4, 8])
@pytest.mark.parametrize("skew", [0.0, 3.0])
def test_every_slot_exactly_once(ep_size, skew):
    tokens, experts, top_k, tile = 64, 16, 3, 8
    ids = random_ids(tokens, experts, top_k, skew=skew)
    s = build_schedule(ids, experts, ep_size, tile)
    seen = torch.zeros(tokens * top_k, dtype=torch.int64)
    for r in range(ep_size):
        real = s.src_rank[r] >= 0
        global_slot = s.src_rank[r][real].long() * (tokens // ep_size) * top_k + s.src_slot[r][real].long()
        seen.index_add_(0, global_slot, torch.ones_like(global_slot))
        # Rows carry the right expert: the tile's expert is the slot's expert.
        local_expert = s.tile_expert[r][torch.nonzero(real).squeeze(1) // tile]
        assert torch.equal(ids.reshape(-1)[global_slot].long(), (local_expert + r * (experts // ep_size)).long())
    assert torch.equal(seen, torch.ones_like(seen))


def test_segments_padded_and_in_global_token_order():
    tokens, experts, top_k, tile = 96, 8, 2, 16
    ids = random_ids(tokens, experts, top_k, skew=2.0)
    for ep in (1, 2, 4):
        s = build_schedule(ids, experts, ep, tile)
        offsets = s.segment_offsets.long()
        assert bool((offsets % tile == 0).all())
        counts = torch.bincount(ids.reshape(-1).long(), minlength=experts).view(ep, -1)
        assert torch.equal(s.segment_counts.long(), counts)
        for r in range(ep):
            for e in range(experts // ep):
                start, end = int(offsets[r, e]), int(offsets[r, e + 1])
                n = int(counts[r, e])
                assert end - start == -(-n // tile) * tile
                rows = slice(start, start + n)
                token = s.src_rank[r][rows].long() * (tokens // ep) + s.src_slot[r][rows].long() // top_k
                assert bool((token[1:] > token[:-1]).all()), "tokens must ascend within a segment"
                assert bool((s.src_rank[r][start + n:end] == -1).all()), "padding rows must be -1"


def test_segments_identical_across_ep_degrees():
    """An expert's segment lists the same global tokens in the same order for any EP degree."""
    tokens, experts, top_k, tile = 64, 8, 2, 8
    ids = random_ids(tokens, experts, top_k, seed=3)

    def segments(ep):
        s = build_schedule(ids, experts, ep, tile)
        out = {}
        for r in range(ep):
            for e in range(experts // ep):
                start, end = int(s.segment_offsets[r, e]), int(s.segment_offsets[r, e + 1])
                src, slot = s.src_rank[r][start:end].long(), s.src_slot[r][start:end].long()
                out[r * (experts // ep) + e] = torch.where(src >= 0, src * (tokens // ep) * top_k + slot, -1)
        return out

    base = segments(1)
    for ep in (2, 4, 8):
        other = segments(ep)
        for e in range(experts):
            assert torch.equal(base[e], other[e]), f"expert {e} differs at EP {ep}"


def test_inverse_map_points_back():
    tokens, experts, top_k, tile, ep = 32, 8, 2, 8, 4
    ids = random_ids(tokens, experts, top_k)
    s = build_schedule(ids, experts, ep, tile)
    for src in range(ep):
        for slot in range(s.slots_per_rank):
            d, row = int(s.dest_rank[src, slot]), int(s.dest_row[src, slot])
            assert int(s.src_rank[d, row]) == src and int(s.src_slot[d, row]) == slot


def test_tile_expert():
    ids = torch.tensor([[0, 1], [0, 2], [1, 2], [0, 1]], dtype=torch.int32)
    s = build_schedule(ids, 4, 1, tile=2)
    # counts: e0=3 (pad 4), e1=3 (pad 4), e2=2, e3=0 -> tiles: e0 e0 e1 e1 e2 | unused...
    assert s.tile_expert[0, :5].tolist() == [0, 0, 1, 1, 2]
    assert bool((s.tile_expert[0, 5:] == -1).all())
    assert s.segment_offsets[0].tolist() == [0, 4, 8, 10, 10]


def test_capacity_overflow_raises_and_worst_case_fits():
    ids = torch.zeros(64, 1, dtype=torch.int32)  # every token to expert 0: one hot expert
    with pytest.raises(ScheduleCapacityError, match="capacity"):
        build_schedule(ids, 8, 2, tile=8, capacity=16)
    s = build_schedule(ids, 8, 2, tile=8)
    assert s.capacity == worst_case_capacity(64, 8, 1, 2, 8)
    assert s.rows_used() == [64, 0]


def test_large_routing_builds_on_input_device():
    # A large routing (the construction is tensor operations only; its speed is the benchmarks' business).
    ids = random_ids(16384, 64, 8)
    s = build_schedule(ids, 64, 8, 128)
    assert s.src_rank.device == ids.device and s.src_rank.dtype == torch.int32
    assert int((s.src_rank >= 0).sum()) == ids.numel() and int(s.segment_counts.sum()) == ids.numel()


@pytest.mark.parametrize("ep_size", [1, 2, 4])
def test_four_transfers_through_one_table_invert_each_other(ep_size):
    """Forward dispatch (pull) + forward combine (push) and backward reverse-combine (pull) + reverse-dispatch
    (push), all driven by the same rows, deliver every source row back to every one of its (token, k) slots."""
    tokens, hidden, experts, top_k, tile = 32, 8, 8, 2, 4
    x, ids, w, *_ = make_problem(tokens, hidden, 4, experts, top_k, seed=5)
    s = build_schedule(ids, experts, ep_size, tile)
    peers = EmulatedPeers(ep_size)
    t_local, slots = tokens // ep_size, tokens // ep_size * top_k
    x_buf = peers.buffer("x", (t_local, hidden), x.dtype)
    grad_buf = peers.buffer("grad", (t_local, hidden), x.dtype)
    w_buf = peers.buffer("w", (slots,), torch.float32)
    combine = peers.buffer("combine", (slots, hidden), x.dtype)
    dx_slots = peers.buffer("dx", (slots, hidden), x.dtype)
    dw_slots = peers.buffer("dw", (slots,), torch.float32)
    grad = torch.randn_like(x)
    for r in range(ep_size):
        x_buf[r].copy_(x[r * t_local:(r + 1) * t_local])
        grad_buf[r].copy_(grad[r * t_local:(r + 1) * t_local])
        w_buf[r].copy_(w[r * t_local:(r + 1) * t_local].reshape(-1))
        for buf in (combine, dx_slots, dw_slots):
            buf[r].fill_(float("nan"))  # poison: every slot must be written
    for r in range(ep_size):
        table = s.rank(r)
        n = table.rows_used()
        rows = torch.empty(n, hidden)
        pull_rows(table, 0, n, x_buf, rows, by_token=True)          # forward dispatch
        push_rows(table, 0, n, rows, combine)                       # forward combine
        pull_rows(table, 0, n, grad_buf, rows, by_token=True)       # backward reverse-combine
        weights = torch.empty(n)
        pull_rows(table, 0, n, w_buf, weights, by_token=False)
        push_rows(table, 0, n, rows * weights[:, None], dx_slots)   # backward reverse-dispatch
        push_rows(table, 0, n, weights, dw_slots)
    for r in range(ep_size):
        own = slice(r * t_local, (r + 1) * t_local)
        assert torch.equal(combine[r].view(t_local, top_k, hidden), x[own, None].expand(-1, top_k, -1))
        expected = grad[own, None] * w[own, :, None]
        assert torch.equal(dx_slots[r].view(t_local, top_k, hidden), expected)
        assert torch.equal(dw_slots[r], w[own].reshape(-1))


@pytest.mark.parametrize("ep_size,top_k,skew", [(1, 2, 0.0), (2, 4, 2.0), (4, 1, 0.0), (8, 3, 6.0)])
def test_kernel_tables_complete_into_the_full_schedule(ep_size, top_k, skew):
    """The megakernel's four tables, completed by KernelSchedule.full_schedule (counts and the inverse map from
    scatters, no sort), give build_schedule's Schedule bit for bit, skewed routing and empty experts included."""
    from mok.cuda.schedule_tables import KernelSchedule
    from conftest import assert_bitwise_equal
    x, ids, w, *_ = make_problem(96, 32, 32, 16, top_k, seed=ep_size, skew=skew)
    for capacity in (None, 4096):
        full = build_schedule(ids, 16, ep_size, 16, capacity)
        tables = KernelSchedule.from_schedule(full)
        without_source = KernelSchedule(tables.ep_size, tables.num_experts, tables.top_k, tables.tokens_per_rank,
                                        tables.tile, tables.src_rank, tables.src_slot, tables.segment_offsets,
                                        tables.tile_expert)
        assert tables.full_schedule() is full
        completed = without_source.full_schedule()
        for field in ("src_rank", "src_slot", "segment_offsets", "segment_counts", "tile_expert", "dest_rank",
                      "dest_row"):
            assert_bitwise_equal(getattr(completed, field), getattr(full, field), f"{field} (capacity {capacity})")
        assert (completed.ep_size, completed.num_experts, completed.top_k, completed.tokens_per_rank,
                completed.tile) == (full.ep_size, full.num_experts, full.top_k, full.tokens_per_rank, full.tile)
