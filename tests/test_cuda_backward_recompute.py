"""``backend="cuda"``'s backward: the Triton backward without the Triton forward.

:func:`mok.cuda.backend.triton_layer_gradients` (what ``CudaMoE.backward`` returns) runs
:meth:`mok.triton_ref.pipeline.TritonRanksRun.backward_without_forward`. Without saved rows the backward
replays dispatch and the gate/up GEMM of every minibatch and nothing else of the forward, and its gradients must
be bit for bit the Triton backend's autograd gradients (``mok.moe(..., backend="triton")`` +
``torch.autograd.grad``), for EP 1 and 2, top-k 1 and 2, rings that hold every minibatch and rings that hold
fewer (so the reverse walk reuses slots), and any subset of inputs that want a gradient. Given saved gate/up
rows (what the megakernel writes when training), only the token rows are pulled again: with the Triton
forward's own rows the bits are again those of forward + backward. Every Triton buffer is NaN-poisoned first.
CPU under TRITON_INTERPRET=1 (tiny shapes), or CUDA when present; the tests marked ``gpu`` run the real
megakernel on a Hopper GPU (its saved rows, and ``backend="cuda"``'s gradients with and without them).
"""

from __future__ import annotations

import pytest
import torch

from conftest import TRITON_DEVICE as DEVICE  # the interpreter without a GPU
from conftest import assert_bitwise_equal, bits, make_problem, rel_err

import mok
from mok.config import MoKConfig

TILE = 16
CONFIG = MoKConfig(expert_padding=TILE)
GRAD_NAMES = ("dx", "d_topk_weights", "d_w_gate", "d_w_up", "d_w_down")
LEAVES = (0, 2, 3, 4, 5)  # positions of (x, topk_weights, w_gate, w_up, w_down) in a make_problem list

pytestmark = pytest.mark.usefixtures("poisoned_triton_buffers")


def problem(tokens, hidden, intermediate, experts, top_k, *, seed=0, device=DEVICE):
    """Fresh random bf16 inputs (the cuda backend's only precision) and a fresh random bf16 dO."""
    p = make_problem(tokens, hidden, intermediate, experts, top_k, dtype=torch.bfloat16, device=device, seed=seed)
    gen = torch.Generator().manual_seed(seed + 100)
    grad = torch.randn(tokens, hidden, generator=gen).to(device=device, dtype=torch.bfloat16)
    return p, grad


def triton_autograd_gradients(p, grad, *, ep_size, config, needs, backend="triton"):
    """What the cuda backend's backward returned before: ``mok.moe`` + ``torch.autograd.grad``."""
    leaves = [t.detach().clone() for t in p]
    for pos, need in zip(LEAVES, needs):
        leaves[pos].requires_grad_(need)
    out = mok.moe(*leaves, backend=backend, ep_size=ep_size, config=config, check_inputs=False)
    wanted = [leaves[pos] for pos, need in zip(LEAVES, needs) if need]
    grads = iter(torch.autograd.grad(out, wanted, grad))
    return [next(grads) if need else None for need in needs]


def recompute_gradients(p, grad, *, ep_size, config, needs):
    from mok.cuda.backend import triton_layer_gradients
    x, ids, w, wg, wu, wd = p
    return triton_layer_gradients(x, ids, w, wg, wu, wd, grad, ep_size=ep_size, config=config, needs=needs)


def assert_same_gradients(got, want, needs, what):
    for name, a, b, need in zip(GRAD_NAMES, got, want, needs):
        if not need:
            assert a is None, f"{what}: {name} was not asked for"
            continue
        assert not bool(torch.isnan(a).any()), f"{what}: {name} has NaN (an unwritten poisoned element?)"
        assert_bitwise_equal(a, b, f"{what}: {name}")


ALL = (True,) * 5
# (T, H, I, E, K, ep_size, minibatch_rows, ring_rows, needs). With TILE 16: "ring < minibatches" cuts each
# rank's table into more 16-row minibatches than its 2-slot ring holds, so the reverse walk's replays reuse
# slots; "ring holds all" has several minibatches and a slot for each; "one minibatch" is the default config.
CASES = {
    "ep1-top2-one-minibatch": (64, 64, 32, 8, 2, 1, None, None, ALL),
    "ep2-top2-ring<minibatches": (64, 64, 32, 8, 2, 2, 16, 32, ALL),
    "ep1-top1-ring-holds-all": (48, 32, 64, 4, 1, 1, 16, None, ALL),
    "ep2-top1-ring<minibatches-some-grads": (48, 32, 64, 4, 1, 2, 16, 32, (False, True, False, True, True)),
    "ep1-top2-weights-only": (64, 64, 32, 8, 2, 1, 16, 48, (False, False, True, True, True)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gradients_bitwise_equal_triton_autograd(name):
    tokens, hidden, inter, experts, top_k, ep_size, mb, ring, needs = CASES[name]
    config = CONFIG.replace(minibatch_rows=mb, ring_rows=ring)
    p, grad = problem(tokens, hidden, inter, experts, top_k, seed=len(name))
    want = triton_autograd_gradients(p, grad, ep_size=ep_size, config=config, needs=needs)
    got = recompute_gradients(p, grad, ep_size=ep_size, config=config, needs=needs)
    assert_same_gradients(got, want, needs, name)


def test_router_weight_gradient_keeps_the_router_weights_dtype():
    """bf16 router weights: d_topk_weights comes back bf16, as the Triton autograd Function returns it."""
    p, grad = problem(64, 64, 32, 8, 2, seed=3)
    p[2] = p[2].to(torch.bfloat16)
    needs = (False, True, False, False, False)
    want = triton_autograd_gradients(p, grad, ep_size=1, config=CONFIG, needs=needs)
    got = recompute_gradients(p, grad, ep_size=1, config=CONFIG, needs=needs)
    assert got[1].dtype == torch.bfloat16
    assert_same_gradients(got, want, needs, "bf16 router weights")


def test_no_gradient_wanted_runs_nothing(monkeypatch):
    from mok.triton_ref import pipeline
    monkeypatch.setattr(pipeline, "TritonLayerRun", None)  # any run would fail
    p, grad = problem(64, 64, 32, 8, 2)
    assert recompute_gradients(p, grad, ep_size=1, config=CONFIG, needs=(False,) * 5) == (None,) * 5


def test_every_minibatch_replayed_once_in_reverse_and_no_forward_work(monkeypatch):
    """The backward replays each minibatch exactly once, in the reverse walk's order, just before using it,
    and nothing of the forward runs besides (no h, no down GEMM, no combine)."""
    from mok.triton_ref import pipeline
    from mok.triton_ref.pipeline import TritonLayerRun
    p, grad = problem(64, 64, 32, 8, 2, seed=5)
    config = CONFIG.replace(minibatch_rows=16, ring_rows=32)
    run = TritonLayerRun(*p, 2, config, "bf16")
    assert any(plan.num_minibatches > plan.num_slots for plan in run.plans.values()), "the ring must reuse slots"
    replays = []
    dispatch_and_project = run._dispatch_and_project

    def spy(rank, i, h_out):
        assert h_out is None, "a replay in the backward stores no h"
        replays.append((rank, i))
        dispatch_and_project(rank, i, h_out)

    def forbidden(*args, **kwargs):
        raise AssertionError("forward work ran in backward_without_forward")

    monkeypatch.setattr(run, "_dispatch_and_project", spy)
    monkeypatch.setattr(run, "forward", forbidden)
    monkeypatch.setattr(run.format, "down", forbidden)
    monkeypatch.setattr(pipeline, "weighted_sum_over_k", forbidden)
    got = run.backward_without_forward(grad)
    expected = [(r, i) for r in run.local_ranks for i in run.plans[r].backward_order()]
    assert replays == expected

    monkeypatch.undo()  # the Triton forward below needs the weighted sum
    needs = ALL
    want = triton_autograd_gradients(p, grad, ep_size=2, config=config, needs=needs)
    assert_same_gradients(got, want, needs, "spied run")
    with pytest.raises(RuntimeError, match="forward"):
        run.backward_without_forward(grad)  # once per run: its rings were handed on


def test_rank_run_through_a_peer_group():
    """TritonRankRun (one rank of a process group; x and router weights copied into the group's buffers):
    backward_without_forward gives the bits of forward() + backward()."""
    from mok.comm import EmulatedPeers
    from mok.triton_ref.pipeline import TritonRankRun
    p, grad = problem(64, 64, 32, 8, 2, seed=7)
    config = CONFIG.replace(minibatch_rows=32, ring_rows=32)

    def rank_run():
        return TritonRankRun(p[0], p[1], p[2], *p[3:], rank=0, world=1, num_experts=8, config=config,
                             peers=EmulatedPeers(1, DEVICE))

    full = rank_run()
    full.forward()
    want = full.backward(grad)
    got = rank_run().backward_without_forward(grad)
    assert_same_gradients(got, want, ALL, "TritonRankRun")


def forward_gate_up_rows(p, ep_size, config=CONFIG):
    """Every schedule row's gate/up pre-activations from a Triton forward whose ring holds the whole table (no
    minibatches in ``config``): bf16 ``[ep_size * capacity, 2I]``, the layout ``saved_gate_up`` takes."""
    from mok.triton_ref.pipeline import TritonLayerRun
    run = TritonLayerRun(*p, ep_size, config, "bf16")
    run.forward()
    capacity = run.schedule.capacity
    return torch.cat([run.rings[r].tensors["gate_up"][:capacity] for r in run.local_ranks])


@pytest.mark.parametrize("ep_size,mb,ring", [(1, None, None), (2, 16, 32)], ids=["ep1", "ep2-ring<minibatches"])
def test_saved_gate_up_rows_replace_the_gate_up_gemm(ep_size, mb, ring, monkeypatch):
    """backward_without_forward(grad, saved_gate_up) given the Triton forward's own gate/up rows: the bits of
    forward() + backward(), whatever the minibatches (the rows are sliced per window and rank), with the token
    rows pulled again but the gate/up GEMM never run."""
    from mok.triton_ref.pipeline import TritonLayerRun
    p, grad = problem(64, 64, 32, 8, 2, seed=21 + ep_size)
    config = CONFIG.replace(minibatch_rows=mb, ring_rows=ring)
    saved = forward_gate_up_rows(p, ep_size)
    want = triton_autograd_gradients(p, grad, ep_size=ep_size, config=config, needs=ALL)

    run = TritonLayerRun(*p, ep_size, config, "bf16")

    def forbidden(*args, **kwargs):
        raise AssertionError("the gate/up GEMM ran although its rows were given")

    monkeypatch.setattr(run.format, "gate_up", forbidden)
    got = run.backward_without_forward(grad, saved_gate_up=saved)
    assert "gate_up" not in next(iter(run.rings.values())).tensors, "the ring's own gate/up rows stay allocated"
    assert_same_gradients(got, want, ALL, f"saved rows, EP {ep_size}")


def test_saved_gate_up_rows_are_the_ones_used():
    """Perturbing one saved row changes the weight gradients (the saved rows are read, not recomputed), and a
    wrong shape is refused."""
    from mok.triton_ref.pipeline import TritonLayerRun
    p, grad = problem(64, 64, 32, 8, 2, seed=31)
    saved = forward_gate_up_rows(p, 1)
    base = TritonLayerRun(*p, 1, CONFIG, "bf16").backward_without_forward(grad, saved_gate_up=saved)
    bumped = saved.clone()
    bumped[0] += 1.0
    moved = TritonLayerRun(*p, 1, CONFIG, "bf16").backward_without_forward(grad, saved_gate_up=bumped)
    assert not torch.equal(bits(base[2]), bits(moved[2])), "d_w_gate ignored the saved rows"
    with pytest.raises(ValueError, match="saved_gate_up"):
        TritonLayerRun(*p, 1, CONFIG, "bf16").backward_without_forward(grad, saved_gate_up=saved[1:])


def test_saved_rows_only_when_autograd_records(monkeypatch):
    """The forward saves gate/up rows only when a backward can follow: not under ``no_grad`` or
    ``inference_mode`` (where ``ctx.needs_input_grad`` still reports ``requires_grad``), not without an input
    that wants a gradient, not with ``MOK_CUDA_SAVE_GATE_UP=0``."""
    from mok.cuda.backend import wants_saved_rows
    leaf, plain = torch.ones(2, requires_grad=True), torch.ones(2)
    assert wants_saved_rows(plain, leaf)
    assert not wants_saved_rows(plain, plain)
    with torch.no_grad():
        assert not wants_saved_rows(leaf)
    with torch.inference_mode():
        assert not wants_saved_rows(leaf)
    monkeypatch.setenv("MOK_CUDA_SAVE_GATE_UP", "0")
    assert not wants_saved_rows(leaf)


@pytest.mark.parametrize("save_rows", [True, False], ids=["saved-rows", "replay"])
def test_cuda_autograd_function_with_a_stand_in_forward(save_rows, monkeypatch):
    """``CudaMoE`` (the autograd Function of ``backend="cuda"``) on the CPU, its megakernel forward replaced by
    the Triton forward (and, when saving, the Triton forward's own gate/up rows): the gradients are the Triton
    backend's bits, the rows travel through ``save_for_backward``, and a second backward of a retained graph
    gives the same bits. The backward builds no schedule: it reads the forward's four tables as they are (made
    here without their source, the inverse map and segment counts that only a full Schedule has)."""
    from types import SimpleNamespace

    from mok.cuda import backend
    from mok.cuda.schedule_tables import KernelSchedule
    from mok.schedule import build_schedule
    p, grad = problem(64, 64, 32, 8, 2, seed=71)
    launched = []

    def stand_in_forward(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size, config, variant,
                         save_gate_up, precision):
        assert precision == "bf16"
        launched.append(save_gate_up)
        args = [x, topk_ids, topk_weights, w_gate, w_up, w_down]
        with torch.no_grad():
            out = mok.moe(*args, backend="triton", ep_size=ep_size, config=config, check_inputs=False)
        full = build_schedule(topk_ids, w_gate.shape[0], ep_size, config.expert_padding, config.capacity_rows)
        tables = KernelSchedule.from_schedule(full)
        launch = SimpleNamespace(out=out, schedule=KernelSchedule(*[getattr(tables, f) for f in (
            "ep_size", "num_experts", "top_k", "tokens_per_rank", "tile", "src_rank", "src_slot", "segment_offsets",
            "tile_expert")]))
        return launch, (forward_gate_up_rows(args, ep_size, config) if save_gate_up else None)

    def no_schedule_build(*args, **kwargs):
        raise AssertionError("the backward built the schedule again")

    monkeypatch.setattr(backend, "_forward", stand_in_forward)
    needs = (True, True, False, True, True)
    leaves = [t.detach().clone() for t in p]
    for pos, need in zip(LEAVES, needs):
        leaves[pos].requires_grad_(need)
    x, ids, w, wg, wu, wd = leaves
    out = backend.CudaMoE.apply(x, w, wg, wu, wd, ids, 2, CONFIG, "pipelined", save_rows, "bf16")
    assert launched == [save_rows]
    monkeypatch.setattr("mok.triton_ref.pipeline.build_schedule", no_schedule_build)
    monkeypatch.setattr(KernelSchedule, "full_schedule", no_schedule_build)  # the four tables as they are
    wanted = [leaves[pos] for pos, need in zip(LEAVES, needs) if need]
    first = torch.autograd.grad(out, wanted, grad, retain_graph=True)
    second = torch.autograd.grad(out, wanted, grad)
    monkeypatch.undo()  # the Triton backend below builds its own schedule
    want = [g for g in triton_autograd_gradients(p, grad, ep_size=2, config=CONFIG, needs=needs) if g is not None]
    for name, a, b, c in zip([n for n, need in zip(GRAD_NAMES, needs) if need], first, second, want):
        assert_bitwise_equal(a, c, f"{name} vs triton")
        assert_bitwise_equal(b, a, f"{name}, second backward of a retained graph")


HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
hopper_only = pytest.mark.skipif(not HOPPER, reason="the SM90 megakernel needs a Hopper GPU (compute capability 9.x)")


def cuda_ready():
    try:
        mok.get_backend("triton")
        mok.get_backend("cuda")
    except (RuntimeError, ValueError) as err:
        pytest.skip(f"backend unavailable: {err}")


@pytest.mark.gpu
@hopper_only
@pytest.mark.parametrize("ep_size,config", [
    (1, MoKConfig()),
    (2, MoKConfig(minibatch_rows=128, ring_rows=256)),  # several minibatches per rank, a ring that reuses slots
], ids=["ep1", "ep2-ring<minibatches"])
@pytest.mark.parametrize("needs", [ALL, (True, False, True, False, True)], ids=["all", "some"])
def test_cuda_backend_gradients_bitwise_equal_triton(ep_size, config, needs, monkeypatch):
    """``backend="cuda"`` with ``MOK_CUDA_SAVE_GATE_UP=0``: the forward is the megakernel's (other rounding), the
    gradients the Triton backward's on recomputed gate/up rows, so they equal ``backend="triton"``'s bit for
    bit."""
    monkeypatch.setenv("MOK_CUDA_SAVE_GATE_UP", "0")
    cuda_ready()
    p, grad = problem(512, 256, 128, 8, 2, seed=11, device="cuda")
    want = triton_autograd_gradients(p, grad, ep_size=ep_size, config=config, needs=needs)
    got = triton_autograd_gradients(p, grad, ep_size=ep_size, config=config, needs=needs, backend="cuda")
    assert_same_gradients(got, want, needs, f"cuda vs triton, EP {ep_size}")


@pytest.mark.gpu
@hopper_only
@pytest.mark.parametrize("ep_size,intermediate,top_k", [(1, 128, 2), (2, 192, 2), (4, 320, 2), (2, 128, 1)],
                         ids=["ep1", "ep2-I192", "ep4-I320", "ep2-top1-fused"])
def test_megakernel_saved_gate_up_rows(ep_size, intermediate, top_k):
    """The megakernel's saved rows (NaN-poisoned first): every row in use written and none past it, close to the
    Triton forward's gate/up rows (other fp32 summation order), and the same bits in both variants and both
    dispatch modes. I = 192 and 320 leave a last column block that reaches past I; top-1 runs the fused
    combine."""
    from mok.cuda import backend
    cuda_ready()
    p, _ = problem(512, 256, intermediate, 8, top_k, seed=41 + ep_size, device="cuda")
    prep = backend.prepare(*p, ep_size=ep_size, poison=True)
    want = forward_gate_up_rows(p, ep_size, MoKConfig())  # the megakernel's 128-row padding
    capacity = prep.schedule.src_rank.shape[1]
    in_use = prep.schedule.segment_offsets[:, -1].tolist()
    results = {}
    for variant in ("simple", "pipelined"):
        for dispatch in ("ring", "gather"):
            saved = backend.saved_gate_up_buffer(prep, poison=True)
            backend.launch(prep, variant=variant, dispatch=dispatch, saved_gate_up=saved)
            backend.check_error(prep)
            used = torch.cat([saved[r * capacity:r * capacity + n] for r, n in enumerate(in_use)])
            past = torch.cat([saved[r * capacity + n:(r + 1) * capacity] for r, n in enumerate(in_use)])
            assert bool(torch.isnan(past).all()), f"{variant}/{dispatch}: a row past the rows in use was written"
            results[(variant, dispatch)] = used
    ref = torch.cat([want[r * capacity:r * capacity + n] for r, n in enumerate(in_use)])
    first = results[("simple", "ring")]
    assert bool(torch.isfinite(first).all()), "a saved row in use was not written"
    assert rel_err(first, ref) < 1e-2, f"saved gate/up vs the Triton forward: {rel_err(first, ref):.3e}"
    for key, got in results.items():
        assert_bitwise_equal(got, first, f"saved rows {key} vs (simple, ring)")


@pytest.mark.gpu
@hopper_only
def test_cuda_backend_gradients_from_saved_rows():
    """The default (``MOK_CUDA_SAVE_GATE_UP`` on): gradients on the megakernel's gate/up rows are close to the
    Triton backend's, the same bits when repeated and for EP 1, 2 and 4 (a small ring for EP 2), and the same
    as the Triton backward given the megakernel's rows directly."""
    from mok.cuda import backend
    cuda_ready()
    p, grad = problem(512, 256, 128, 8, 2, seed=51, device="cuda")
    want = triton_autograd_gradients(p, grad, ep_size=1, config=MoKConfig(), needs=ALL)
    base = triton_autograd_gradients(p, grad, ep_size=1, config=MoKConfig(), needs=ALL, backend="cuda")
    runs = {f"EP {ep}, {cfg}": triton_autograd_gradients(p, grad, ep_size=ep, config=cfg, needs=ALL, backend="cuda")
            for ep, cfg in [(1, MoKConfig()), (2, MoKConfig(minibatch_rows=128, ring_rows=256)), (4, MoKConfig())]}
    for name, a, b in zip(GRAD_NAMES, base, want):
        assert bool(torch.isfinite(a).all()), name
        assert rel_err(a, b) < 2e-2, f"{name}: relative error vs triton {rel_err(a, b):.3e}"
    for key, grads in runs.items():
        assert_same_gradients(grads, base, ALL, f"cuda saved rows, {key} vs EP 1")
    # The same as handing the megakernel's rows to the Triton backward directly.
    out, saved = backend.sm90_forward(*p, save_gate_up=True, check=True)
    direct = backend.triton_layer_gradients(*p, grad, ep_size=1, config=MoKConfig(), saved_gate_up=saved)
    assert_same_gradients(direct, base, ALL, "triton_layer_gradients(saved_gate_up=...)")
    # Only some inputs wanting a gradient: the same bits for those.
    some = (True, False, True, False, True)
    partial = triton_autograd_gradients(p, grad, ep_size=1, config=MoKConfig(), needs=some, backend="cuda")
    assert_same_gradients(partial, [g if n else None for g, n in zip(base, some)], some, "cuda saved rows, some")


@pytest.mark.gpu
@hopper_only
def test_cuda_backend_saves_rows_only_when_training(monkeypatch):
    """``mok.moe(backend="cuda")`` under ``no_grad`` on inputs that require grad (an ``nn.Module`` at inference)
    allocates no saved rows; with autograd recording it does, once per call."""
    from mok.cuda import backend
    cuda_ready()
    calls = []
    real = backend.saved_gate_up_buffer
    monkeypatch.setattr(backend, "saved_gate_up_buffer", lambda *a, **k: calls.append(1) or real(*a, **k))
    p, grad = problem(256, 256, 128, 8, 2, seed=61, device="cuda")
    leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in p]
    with torch.no_grad():
        mok.moe(*leaves, backend="cuda", check_inputs=False)
    assert calls == [], "rows saved under no_grad"
    out = mok.moe(*leaves, backend="cuda", check_inputs=False)
    assert calls == [1]
    out.backward(grad)
    assert all(leaves[pos].grad is not None for pos in LEAVES)
