"""Per-pass buffers reused across calls on the GPU (mok/triton_ref/pipeline.py, PassBuffers): the same bits.

Consecutive ``backend="cuda"`` and ``backend="triton"`` training steps (forward + backward) whose Triton passes
take the previous call's ring and scratch give bit for bit what a fresh process gives (reuse off, every cache
cleared), with another problem's step in between, with and without the megakernel's saved gate/up rows, EP 1 and
EP 2 with a ring that holds fewer minibatches than it walks. A side stream keeps its own buffers, and a CUDA
graph capture neither takes nor keeps any.
"""

from __future__ import annotations

import pytest
import torch

from conftest import assert_bitwise_equal, make_problem

import mok
from mok.comm import pointer_tables
from mok.config import MoKConfig
from mok.triton_ref import pipeline
from mok.triton_ref.pipeline import PassBuffers

pytestmark = pytest.mark.gpu

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
hopper_only = pytest.mark.skipif(not HOPPER, reason="the SM90 megakernel needs a Hopper GPU (compute capability 9.x)")
NAMES = ("out", "dx", "d_topk_weights", "d_w_gate", "d_w_up", "d_w_down")
SETUPS = [(1, MoKConfig()), (2, MoKConfig(minibatch_rows=128, ring_rows=256))]
SETUP_IDS = ["ep1", "ep2-ring<minibatches"]


from test_triton_run_reuse import empty_pool  # noqa: E402,F401  (autouse: every test starts from an empty pool)


def problem(seed, tokens=512):
    p = make_problem(tokens, 256, 128, 8, 2, dtype=torch.bfloat16, device="cuda", seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    return p, torch.randn(tokens, 256, generator=gen).to(device="cuda", dtype=torch.bfloat16)


def step(backend, p, grad, ep_size, config):
    """One training step's output and the five gradients."""
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in p]
    out = mok.moe(*leaves, backend=backend, ep_size=ep_size, config=config)
    grads = torch.autograd.grad(out, [leaves[i] for i in (0, 2, 3, 4, 5)], grad)
    torch.cuda.synchronize()
    return [out.detach(), *grads]


def fresh_process_step(backend, p, grad, ep_size, config):
    """As a new process would run it: nothing kept, nothing reused, no cached pointer table or workspace."""
    pipeline.set_buffer_reuse(False)
    pipeline.release_pass_buffers()
    pointer_tables._SPACED_TABLES.clear()
    if backend == "cuda":
        from mok.cuda.workspace import release_workspaces
        release_workspaces()
    try:
        return step(backend, p, grad, ep_size, config)
    finally:
        pipeline.set_buffer_reuse(True)


def kept_keys():
    return list(pipeline.free_pass_buffers())


def assert_consecutive_steps_bitwise(backend, ep_size, config):
    p, grad = problem(11)
    other, other_grad = problem(12, tokens=256)
    want = fresh_process_step(backend, p, grad, ep_size, config)
    first = step(backend, p, grad, ep_size, config)
    assert kept_keys(), f"{backend}: the backward kept no buffer"
    step(backend, other, other_grad, ep_size, config)  # other sizes in between
    second = step(backend, p, grad, ep_size, config)
    third = step(backend, p, grad, ep_size, config)
    for name, a, b, c, d in zip(NAMES, want, first, second, third):
        assert_bitwise_equal(b, a, f"{backend} {name}: first call vs a fresh process")
        assert_bitwise_equal(c, a, f"{backend} {name}: second call (buffers reused) vs a fresh process")
        assert_bitwise_equal(d, a, f"{backend} {name}: third call (buffers reused) vs a fresh process")


@hopper_only
@pytest.mark.parametrize("save_rows", ["1", "0"], ids=["saved-gate-up", "recomputed-gate-up"])
@pytest.mark.parametrize("ep_size,config", SETUPS, ids=SETUP_IDS)
def test_cuda_backend_steps_reusing_buffers_are_bitwise_a_fresh_process(ep_size, config, save_rows, monkeypatch):
    monkeypatch.setenv("MOK_CUDA_SAVE_GATE_UP", save_rows)
    try:
        mok.get_backend("cuda")
    except (RuntimeError, ValueError) as err:
        pytest.skip(f"backend unavailable: {err}")
    assert_consecutive_steps_bitwise("cuda", ep_size, config)


@pytest.mark.parametrize("ep_size,config", SETUPS, ids=SETUP_IDS)
def test_triton_backend_steps_reusing_buffers_are_bitwise_a_fresh_process(ep_size, config):
    assert_consecutive_steps_bitwise("triton", ep_size, config)


def test_a_side_stream_keeps_its_own_buffers_and_the_same_bits():
    p, grad = problem(13)
    on_default = step("triton", p, grad, 1, MoKConfig())
    default_handle = torch.cuda.current_stream().cuda_stream
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        on_side = step("triton", p, grad, 1, MoKConfig())
    torch.cuda.current_stream().wait_stream(side)
    streams = {key[1] for key in kept_keys()}
    assert streams == {default_handle, side.cuda_stream}, "each stream keeps its own buffers"
    for name, a, b in zip(NAMES, on_default, on_side):
        assert_bitwise_equal(b, a, f"{name}: side stream vs default stream")


def test_a_graph_capture_neither_takes_nor_keeps_buffers():
    """A real capture: what a pass takes comes from the graph's pool, and nothing goes back into the kept ones
    (a replay would go on writing it while later calls use it)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        warm = PassBuffers(torch.device("cuda", torch.cuda.current_device()))
        kept_before = warm.take((256, 64), torch.bfloat16)
        warm.give_back()
    stream.synchronize()
    before = pipeline.free_pass_buffers()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        captured = PassBuffers(torch.device("cuda", torch.cuda.current_device()))
        taken = captured.take((256, 64), torch.bfloat16)
        taken.fill_(1.0)
        captured.give_back()
    assert not captured.reuse
    assert taken is not kept_before and taken.data_ptr() != kept_before.data_ptr()
    after = pipeline.free_pass_buffers()
    assert list(after) == list(before)
    assert all(len(after[k]) == len(before[k]) and all(t is u for t, u in zip(after[k], before[k])) for k in before)
    graph.replay()
    torch.cuda.synchronize()
