"""Less host work per Triton run, not one bit different (mok/triton_ref/pipeline.py).

* :class:`PassBuffers`: a pass's scratch rows (and a backward-without-forward's ring) are kept for the next pass
  of the same device, stream, shape and dtype; a pass checks them out (two passes at once never share one),
  keeps nothing during a CUDA graph capture or with reuse off, poisons what it takes when poisoning is on, and
  the pool stays bounded.
* Consecutive runs that reuse those buffers give bit for bit the gradients of runs that allocate fresh ones:
  ``backward_without_forward`` (what ``backend="cuda"``'s backward runs), the Triton backend's forward +
  backward, EP 1 and 2, a ring that holds fewer minibatches than it walks.
* A run given only the schedule's four expert-side tables (the megakernel's ``KernelSchedule``, nothing
  completed) gives the bits of a run given the whole ``Schedule``.

CPU under TRITON_INTERPRET=1 at tiny shapes (CUDA when present); the GPU side (streams, graph capture, the
``cuda`` backend) is tests/test_triton_run_reuse_gpu.py.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from conftest import TRITON_DEVICE as DEVICE  # the interpreter without a GPU
from conftest import assert_bitwise_equal, make_problem

import mok
from mok.config import MoKConfig
from mok.schedule import build_schedule
from mok.triton_ref import pipeline
from mok.triton_ref.pipeline import PassBuffers, TritonLayerRun

TILE = 16
CONFIG = MoKConfig(expert_padding=TILE)
GRAD_NAMES = ("dx", "d_topk_weights", "d_w_gate", "d_w_up", "d_w_down")
SETUPS = [(1, CONFIG), (2, CONFIG.replace(minibatch_rows=16, ring_rows=32))]
SETUP_IDS = ["ep1", "ep2-ring<minibatches"]


@pytest.fixture(autouse=True)
def empty_pool():
    """Every test starts from an empty pool with reuse on, and leaves the previous setting behind."""
    previous = pipeline.set_buffer_reuse(True)
    pipeline.release_pass_buffers()
    yield
    pipeline.release_pass_buffers()
    pipeline.set_buffer_reuse(previous)


def problem(seed, device=DEVICE):
    p = make_problem(64, 64, 32, 8, 2, dtype=torch.bfloat16, device=device, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    return p, torch.randn(64, 64, generator=gen).to(device=device, dtype=torch.bfloat16)


def kept() -> int:
    return sum(len(free) for free in pipeline.free_pass_buffers().values())


def assert_same(got, want, what):
    for name, a, b in zip(GRAD_NAMES, got, want):
        assert_bitwise_equal(a, b, f"{what}: {name}")


# --------------------------------------------------------------------------------------------------------
# The pool
# --------------------------------------------------------------------------------------------------------
def test_a_pass_gets_the_buffer_the_previous_pass_gave_back():
    first = PassBuffers(torch.device(DEVICE))
    a = first.take((8, 4), torch.bfloat16)
    first.give_back()
    second = PassBuffers(torch.device(DEVICE))
    assert second.take((8, 4), torch.bfloat16) is a
    assert second.take((8, 4), torch.bfloat16) is not a  # checked out: a second one is fresh
    assert kept() == 0


def test_another_shape_dtype_or_stream_gets_its_own_buffer():
    first = PassBuffers(torch.device(DEVICE))
    a = first.take((8, 4), torch.bfloat16)
    first.give_back()
    other = PassBuffers(torch.device(DEVICE))
    assert other.take((8, 8), torch.bfloat16) is not a
    assert other.take((8, 4), torch.float32) is not a
    elsewhere = PassBuffers(torch.device(DEVICE))
    elsewhere.stream += 1  # stands in for another CUDA stream (tests/test_triton_run_reuse_gpu.py: a real one)
    assert elsewhere.take((8, 4), torch.bfloat16) is not a
    assert kept() == 1 and list(pipeline.free_pass_buffers()) == [(str(torch.device(DEVICE)), first.stream, (8, 4),
                                                                   torch.bfloat16)]


def test_nothing_is_kept_without_give_back_or_with_reuse_off():
    pass_that_raised = PassBuffers(torch.device(DEVICE))
    pass_that_raised.take((8, 4), torch.bfloat16)
    assert kept() == 0
    pipeline.set_buffer_reuse(False)
    off = PassBuffers(torch.device(DEVICE))
    a = off.take((8, 4), torch.bfloat16)
    off.give_back()
    assert kept() == 0
    assert PassBuffers(torch.device(DEVICE)).take((8, 4), torch.bfloat16) is not a


def test_nothing_is_taken_or_kept_while_a_graph_is_captured(monkeypatch):
    """A capture bypasses the pool both ways (stood in for: the capture check runs for CUDA devices only)."""
    first = PassBuffers(torch.device(DEVICE))
    a = first.take((8, 4), torch.bfloat16)
    first.give_back()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setattr(torch.cuda, "device", lambda device: torch.device(DEVICE))  # a no-op context manager
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device: SimpleNamespace(cuda_stream=first.stream))
    capturing = PassBuffers(torch.device("cuda", 0))
    assert not capturing.reuse
    capturing.device = torch.device(DEVICE)  # allocate where the test can
    assert capturing.take((8, 4), torch.bfloat16) is not a
    capturing.give_back()
    assert kept() == 1


def test_a_taken_buffer_is_poisoned_when_poisoning_is_on(poisoned_triton_buffers):
    first = PassBuffers(torch.device(DEVICE))
    first.take((8, 4), torch.bfloat16).fill_(1.0)
    first.take((8,), torch.uint8).fill_(7)
    first.give_back()
    again = PassBuffers(torch.device(DEVICE))
    assert bool(torch.isnan(again.take((8, 4), torch.bfloat16)).all())
    assert bool((again.take((8,), torch.uint8) == 0xFF).all())


def test_the_pool_is_bounded_least_recently_used_first():
    for width in range(1, pipeline._FREE_BUFFERS_MAX + 6):
        p = PassBuffers(torch.device(DEVICE))
        p.take((2, width), torch.float32)
        p.give_back()
    widths = [key[2][1] for key in pipeline.free_pass_buffers()]
    assert kept() == pipeline._FREE_BUFFERS_MAX
    assert widths == list(range(6, pipeline._FREE_BUFFERS_MAX + 6))  # the five oldest went


# --------------------------------------------------------------------------------------------------------
# Runs: the same bits with buffers reused as with fresh ones
# --------------------------------------------------------------------------------------------------------
def without_forward(p, grad, ep_size, config, saved=None):
    return TritonLayerRun(*p, ep_size, config, "bf16").backward_without_forward(grad, saved)


@pytest.mark.parametrize("ep_size,config", SETUPS, ids=SETUP_IDS)
def test_consecutive_backwards_without_forward_reuse_buffers_bitwise(ep_size, config, poisoned_triton_buffers):
    """Fresh buffers (reuse off), then twice with reuse: the second call takes the first one's ring and
    scratch (poisoned again), and all three give the same bits; another problem in between changes nothing."""
    p, grad = problem(3)
    pipeline.set_buffer_reuse(False)
    want = without_forward(p, grad, ep_size, config)
    pipeline.set_buffer_reuse(True)
    first = without_forward(p, grad, ep_size, config)
    pool = pipeline.free_pass_buffers()
    assert pool, "nothing was kept"
    run = TritonLayerRun(*p, ep_size, config, "bf16")
    ring_rows = next(iter(run.plans.values())).ring_rows
    assert any(key[2] == (ring_rows, 64) for key in pool), "the ring was not kept"
    # H = 2I = 64 here: rows of 64 bf16 are the ring's x and gate/up columns of every rank, plus the scratch
    # grad_rows and d_gate_up when the scratch has as many rows as the ring (one minibatch).
    ring_shaped = sum(len(free) for key, free in pool.items() if key[2:] == ((ring_rows, 64), torch.bfloat16))
    assert ring_shaped == 2 * len(run.local_ranks) + (2 if run.scratch_rows == ring_rows else 0), \
        "the rings were not kept"
    other, other_grad = problem(4)
    without_forward(other, other_grad, ep_size, config)
    second = without_forward(p, grad, ep_size, config)
    assert_same(first, want, "reused vs fresh")
    assert_same(second, want, "second reuse vs fresh")


def test_backward_without_forward_with_saved_rows_reuses_buffers_bitwise(poisoned_triton_buffers):
    p, grad = problem(5)
    run = TritonLayerRun(*p, 1, CONFIG, "bf16")
    run.forward()
    saved = torch.cat([run.rings[r].tensors["gate_up"][:run.schedule.capacity] for r in run.local_ranks])
    pipeline.set_buffer_reuse(False)
    want = without_forward(p, grad, 1, CONFIG, saved)
    pipeline.set_buffer_reuse(True)
    for call in range(2):
        assert_same(without_forward(p, grad, 1, CONFIG, saved), want, f"saved rows, call {call}")


@pytest.mark.parametrize("ep_size,config", SETUPS, ids=SETUP_IDS)
def test_consecutive_triton_backend_steps_reuse_buffers_bitwise(ep_size, config, poisoned_triton_buffers):
    p, grad = problem(6)

    def step():
        leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in p]
        out = mok.moe(*leaves, backend="triton", ep_size=ep_size, config=config, check_inputs=False)
        wanted = [leaves[i] for i in (0, 2, 3, 4, 5)]
        return [out, *torch.autograd.grad(out, wanted, grad)]

    pipeline.set_buffer_reuse(False)
    want = step()
    pipeline.set_buffer_reuse(True)
    first = step()
    assert kept() > 0
    second = step()
    for name, a, b, c in zip(("out", *GRAD_NAMES), want, first, second):
        assert_bitwise_equal(b, a, f"{name}: first reuse vs fresh")
        assert_bitwise_equal(c, a, f"{name}: second reuse vs fresh")


def test_a_run_hands_its_rings_on_and_refuses_to_run_again():
    p, grad = problem(7)
    run = TritonLayerRun(*p, 1, CONFIG, "bf16")
    run.backward_without_forward(grad)
    assert all(not ring.tensors for ring in run.rings.values())
    with pytest.raises(RuntimeError, match="backward_without_forward"):
        run.backward(grad)
    with pytest.raises(RuntimeError, match="forward"):
        run.forward()
    with pytest.raises(RuntimeError, match="forward"):
        TritonLayerRun(*p, 1, CONFIG, "bf16").backward(grad)  # no forward ran


# --------------------------------------------------------------------------------------------------------
# The four expert-side tables are all a run needs
# --------------------------------------------------------------------------------------------------------
def tables_only(schedule):
    """Only what the megakernel's KernelSchedule holds: sizes and the four expert-side tables."""
    return SimpleNamespace(ep_size=schedule.ep_size, num_experts=schedule.num_experts, top_k=schedule.top_k,
                           tile=schedule.tile, capacity=schedule.capacity, src_rank=schedule.src_rank.clone(),
                           src_slot=schedule.src_slot.clone(), segment_offsets=schedule.segment_offsets.clone(),
                           tile_expert=schedule.tile_expert.clone())


@pytest.mark.parametrize("ep_size,config", SETUPS, ids=SETUP_IDS)
def test_a_run_on_the_tables_alone_gives_the_same_bits(ep_size, config, poisoned_triton_buffers):
    p, grad = problem(8)
    schedule = build_schedule(p[1], 8, ep_size, TILE)
    tables = tables_only(schedule)
    want = TritonLayerRun(*p, ep_size, config, "bf16", schedule=schedule).backward_without_forward(grad)
    got = TritonLayerRun(*p, ep_size, config, "bf16", schedule=tables).backward_without_forward(grad)
    assert_same(got, want, "without forward, tables only")
    full = TritonLayerRun(*p, ep_size, config, "bf16", schedule=schedule)
    want_out, want = full.forward(), full.backward(grad)
    run = TritonLayerRun(*p, ep_size, config, "bf16", schedule=tables)
    got_out, got = run.forward(), run.backward(grad)
    assert_bitwise_equal(got_out, want_out, "forward, tables only")
    assert_same(got, want, "forward + backward, tables only")


def test_the_megakernel_tables_without_their_source_give_the_same_bits():
    """What ``backend="cuda"`` would pass instead of ``full_schedule()``: its KernelSchedule, no source."""
    from mok.cuda.schedule_tables import build_kernel_schedule
    p, grad = problem(9)
    kernel_tables = dataclasses.replace(build_kernel_schedule(p[1], 8, 2, TILE, device_kernels=False), source=None)
    want = TritonLayerRun(*p, 2, CONFIG, "bf16", schedule=kernel_tables.full_schedule()).backward_without_forward(
        grad)
    got = TritonLayerRun(*p, 2, CONFIG, "bf16", schedule=kernel_tables).backward_without_forward(grad)
    assert_same(got, want, "KernelSchedule vs its full_schedule()")


def test_tables_of_another_layer_are_refused():
    p, _ = problem(10)
    tables = tables_only(build_schedule(p[1], 8, 2, TILE))
    with pytest.raises(ValueError, match="another layer"):
        TritonLayerRun(*p, 1, CONFIG, "bf16", schedule=tables)
