"""Host-side shortcuts of the Triton pipeline (round 27's host-time work on the ``cuda`` backward): the TMA
descriptors rebuilt from kept fields (mok.triton_ref.grouped_gemm), and the whole-range views no longer made
(mok.triton_ref.pipeline, push_combine). Each gives what the long way gives, and keeps no tensor alive."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from mok.triton_ref import _common, grouped_gemm
from mok.triton_ref.push_combine import sources_from
from conftest import TRITON_DEVICE, assert_bitwise_equal

BF16 = torch.bfloat16


@pytest.fixture
def fresh_fields(monkeypatch):
    """An empty descriptor-field cache for the test (the module's own is left as it was)."""
    monkeypatch.setattr(grouped_gemm, "_TMA_FIELDS", {})
    return grouped_gemm._TMA_FIELDS


def _fields(desc) -> dict:
    return {name: value for name, value in vars(desc).items() if name != "base"}


def test_a_descriptor_seen_again_is_what_triton_makes(fresh_fields):
    w = torch.zeros(4, 64, 32, dtype=BF16)
    spec = (w, w.shape, (1, 16, 32))
    first, = grouped_gemm._descriptors(spec)
    again, = grouped_gemm._descriptors(spec)  # from the kept fields
    made = _common.tma_descriptor(*spec)
    assert type(again) is type(made) and again is not first
    assert again.base is w and _fields(again) == _fields(made) == _fields(first)
    assert len(fresh_fields) == 1


def test_a_new_tensor_gets_its_own_descriptor(fresh_fields):
    block = (16, 32)
    a, b = torch.zeros(64, 32, dtype=BF16), torch.zeros(64, 32, dtype=BF16)
    desc_a, = grouped_gemm._descriptors((a, (64, 32), block))
    desc_b, = grouped_gemm._descriptors((b, (64, 32), block))
    assert desc_a.base is a and desc_b.base is b and len(fresh_fields) == 2
    other_rows, = grouped_gemm._descriptors((a, (32, 32), block))  # another shape of the same tensor
    assert other_rows.shape == [32, 32] and len(fresh_fields) == 3


def test_no_tma_unless_every_tensor_can_take_it(fresh_fields):
    good = torch.zeros(64, 32, dtype=BF16)
    misaligned = torch.zeros(64 * 32 + 1, dtype=BF16)[1:].view(64, 32)  # base 2 bytes past 16-byte alignment
    for _ in range(2):  # the answer is kept as well
        assert grouped_gemm._descriptors((good, (64, 32), (16, 32)), (misaligned, (64, 32), (16, 32))) is None
    assert fresh_fields[next(k for k in fresh_fields if k[0] == misaligned.data_ptr())] is None


def test_a_rejected_descriptor_is_rejected_every_time(fresh_fields):
    t = torch.zeros(64, 32, dtype=BF16)
    for _ in range(2):
        with pytest.raises(ValueError, match="power of 2"):
            grouped_gemm._descriptors((t, (64, 32), (24, 32)))
    assert not fresh_fields


def test_the_cache_keeps_no_tensor_alive_and_stays_bounded(fresh_fields, monkeypatch):
    monkeypatch.setattr(grouped_gemm, "_TMA_FIELDS_MAX", 4)
    t = torch.zeros(64, 32, dtype=BF16)
    alive = weakref.ref(t)
    grouped_gemm._descriptors((t, (64, 32), (16, 32)))
    grouped_gemm._descriptors((t, (64, 32), (16, 32)))
    del t
    gc.collect()
    assert alive() is None
    kept = [torch.zeros(16 * (i + 1), 32, dtype=BF16) for i in range(10)]
    for k in kept:
        grouped_gemm._descriptors((k, k.shape, (16, 32)))
        assert len(fresh_fields) <= 4


def test_tma_gemms_match_pointer_loads_from_kept_descriptors(fresh_fields):
    """The dgrad and wgrad launches with TMA on (under the interpreter too) give the pointer path's bits, on the
    first call (descriptors made) and the second (rebuilt from the kept fields)."""
    gen = torch.Generator().manual_seed(0)
    tile, experts, k_each, n = 16, 2, 32, 32
    a = torch.randn(2 * tile, 2 * k_each, generator=gen).to(BF16).to(TRITON_DEVICE)
    w_gate, w_up = (torch.randn(experts, k_each, n, generator=gen).to(BF16).to(TRITON_DEVICE) for _ in range(2))
    tile_expert = torch.tensor([0, 1], dtype=torch.int32, device=TRITON_DEVICE)
    seg = torch.tensor([0, tile, 2 * tile], dtype=torch.int32, device=TRITON_DEVICE)

    def run():
        out = torch.empty(2 * tile, n, dtype=BF16, device=TRITON_DEVICE)
        grouped_gemm.grouped_gemm_dgrad(a, (w_gate, w_up), tile_expert, tile, out=out)
        dw = torch.empty(experts, k_each, n, dtype=BF16, device=TRITON_DEVICE)
        grouped_gemm.grouped_wgrad(a[:, :k_each], a[:, k_each:], seg, 0, 2 * tile, tile, out=dw, chain=None,
                                   load_chain=False, store_final=True)
        return out, dw

    want = run()
    with _common.override_configs({"*": {"tma": True}}):
        first = run()
        assert fresh_fields and all(v is not None for v in fresh_fields.values())
        second = run()
    for call, got in (("first", first), ("second", second)):
        for name, g, w in zip(("dgrad", "wgrad"), got, want):
            assert_bitwise_equal(g, w, f"{name}, TMA, {call} call")


def test_whole_range_views_are_the_tensors_themselves():
    t = torch.zeros(8, 4)
    assert _common.rows_of(t, slice(0, 8)) is t and _common.rows_of(t, slice(0, 9)) is t
    assert _common.rows_of(t, slice(0, None)) is t
    part = _common.rows_of(t, slice(2, 6))
    assert part.data_ptr() == t[2].data_ptr() and part.shape == (4, 4)
    assert _common.rows_of(t, slice(0, 4)).shape == (4, 4)

    class Table:
        src_rank = torch.arange(8, dtype=torch.int32)
        src_slot = torch.arange(8, dtype=torch.int32) * 2

    rank, slot = sources_from(Table, 0)
    assert rank is Table.src_rank and slot is Table.src_slot
    rank, slot = sources_from(Table, 3)
    assert rank.tolist() == list(range(3, 8)) and slot.tolist() == [6, 8, 10, 12, 14]
