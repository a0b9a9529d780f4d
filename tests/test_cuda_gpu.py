"""GPU tests of the SM90 megakernel forward (``backend="cuda"``); Hopper only.

Accuracy: against the reference backend (same rounding points, different fp32 summation order inside the
GEMMs) and, at small shapes, against an fp64 oracle: the megakernel's error must stay within 1.25x the
reference's own bf16 error. Against the Triton backend when it is available.

Determinism: bit for bit across repeated launches, both variants, both dispatch modes, CTA counts, emulated EP
degrees 1/2/4/8,
minibatch and ring sizes, CUDA-graph replay, the fused top-1 combine against the unfused one, and reused
workspaces. Every launch here runs with outputs, combine slots and ring poisoned with NaN, and with the
kernel's error record checked.

Layer-level: the sync-free schedule tables equal mok.build_schedule's; a layer forward never synchronises
with the device (torch's sync debug mode set to error); a failed launch is reported by the deferred check;
the timing ablations run to completion without an error record.

Run on the H200: ``python -m pytest -q tests/test_cuda_gpu.py -x``.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_bitwise_equal, rel_err

import mok
from mok.config import ANCHOR_SHAPES, EP64_SLICES, MoKConfig

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HOPPER, reason="the SM90 megakernel needs a Hopper GPU (compute capability 9.x)")]

VARIANTS = ["simple", "pipelined"]


@pytest.fixture(scope="module", autouse=True)
def extension():
    """Build (or load) the extension once, outside any timing."""
    from mok.cuda.build import load_extension
    return load_extension()


@pytest.fixture
def triton_backend():
    """The Triton backend (the comparison and the cuda backend's backward need it); skips the test without it."""
    try:
        return mok.get_backend("triton")
    except (RuntimeError, ValueError) as err:
        pytest.skip(f"triton backend unavailable: {err}")


def make_inputs(tokens, hidden, intermediate, experts, top_k, *, seed=0, skew=0.0):
    from mok.cuda.sanitize_check import make_inputs as make
    return make(tokens, hidden, intermediate, experts, top_k, seed=seed, skew=skew)


def cuda_forward(problem, *, ep_size=1, config=None, variant="simple", num_ctas=0, poison=True, fuse_top1=None,
                 dispatch=None):
    from mok.cuda.backend import sm90_forward
    return sm90_forward(*problem, ep_size=ep_size, config=config, variant=variant, num_ctas=num_ctas, check=True,
                        poison=poison, fuse_top1=fuse_top1, dispatch=dispatch)


def reference_forward(problem, *, ep_size=1, config=None):
    with torch.no_grad():
        return mok.moe(*problem, backend="reference", ep_size=ep_size, config=config, check_inputs=False)


def oracle_forward(x, ids, w, wg, wu, wd):
    """fp64 per-expert loop on the bf16 inputs, no intermediate rounding (mok.backends.naive)."""
    from mok.backends.naive import naive_moe
    with torch.no_grad():
        return naive_moe(x.double(), ids, w.double(), wg.double(), wu.double(), wd.double())


def check_accuracy(out, problem, *, ep_size=1, config=None, with_oracle=True):
    assert bool(torch.isfinite(out).all()), "non-finite output (an unwritten element or a stale read)"
    ref = reference_forward(problem, ep_size=ep_size, config=config)
    err_ref = rel_err(out, ref)
    assert err_ref < 1e-2, f"relative error vs reference {err_ref:.3e}"
    if with_oracle:
        oracle = oracle_forward(*problem)
        err_cuda, err_reference = rel_err(out, oracle), rel_err(ref, oracle)
        assert err_cuda <= 1.25 * err_reference + 1e-4, (
            f"cuda error vs fp64 {err_cuda:.3e} exceeds 1.25x the reference's {err_reference:.3e}")
    return err_ref


# ------------------------------------------------------------------------------------------------------
# Accuracy
# ------------------------------------------------------------------------------------------------------

SMALL_SHAPES = {
    # name: (T, H, I, E, K, skew)
    "basic": (256, 256, 128, 8, 2, 0.0),
    "tiny-hidden": (192, 64, 64, 4, 1, 0.0),
    "ragged-tokens": (300, 512, 192, 4, 2, 0.0),   # T % 128 != 0, I % 128 == 64
    "h-not-256": (160, 320, 256, 8, 4, 0.0),       # the last down column block is partly outside H
    "empty-experts": (512, 256, 128, 16, 2, 4.0),  # strong skew: many experts receive nothing
    "one-hot-expert": (256, 256, 256, 8, 1, 30.0), # top-1 with extreme skew: (almost) all rows on expert 0
    "wide": (128, 1024, 512, 8, 8, 0.0),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", list(SMALL_SHAPES))
def test_small_shapes_match_reference_and_oracle(name, variant):
    t, h, i, e, k, skew = SMALL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=list(SMALL_SHAPES).index(name))
    out = cuda_forward(problem, variant=variant)
    check_accuracy(out, problem)


# The model shapes with fewer tokens: (shape, tokens, seed); EP-64 slices at 1024 tokens, anchors at 512.
REDUCED_SHAPES = [(s, 1024, 3) for s in EP64_SLICES] + [(s, 512, 4) for s in ANCHOR_SHAPES]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape,tokens,seed", REDUCED_SHAPES, ids=[s.name for s, _, _ in REDUCED_SHAPES])
def test_model_shapes_reduced_tokens(shape, tokens, seed, variant):
    s = shape.with_tokens(tokens)
    problem = make_inputs(s.tokens, s.hidden, s.intermediate, s.num_experts, s.top_k, seed=seed)
    out = cuda_forward(problem, variant=variant)
    check_accuracy(out, problem, with_oracle=False)


@pytest.mark.parametrize("ep_size", [2, 4, 8])
def test_emulated_ep_matches_reference(ep_size):
    problem = make_inputs(512, 256, 128, 16, 4, seed=5)
    config = MoKConfig(minibatch_rows=256)
    out = cuda_forward(problem, ep_size=ep_size, config=config, variant="pipelined")
    check_accuracy(out, problem, ep_size=ep_size, config=config)


@pytest.mark.usefixtures("triton_backend")
def test_matches_triton_backend():
    problem = make_inputs(384, 512, 256, 8, 2, seed=6)
    out = cuda_forward(problem, variant="pipelined")
    with torch.no_grad():
        tri = mok.moe(*problem, backend="triton", check_inputs=False)
    assert rel_err(out, tri) < 1e-2


# ------------------------------------------------------------------------------------------------------
# Determinism
# ------------------------------------------------------------------------------------------------------

def test_bitwise_repeatable_across_runs_variants_and_cta_counts():
    problem = make_inputs(640, 512, 256, 8, 4, seed=7, skew=0.5)
    config = MoKConfig(minibatch_rows=256, ring_rows=256)
    first = cuda_forward(problem, config=config, variant="simple")
    for variant in VARIANTS:
        for num_ctas in (0, 1, 3, 0):
            out = cuda_forward(problem, config=config, variant=variant, num_ctas=num_ctas)
            assert_bitwise_equal(out, first, f"variant={variant} num_ctas={num_ctas}")


@pytest.mark.parametrize("variant", VARIANTS)
def test_bitwise_identical_across_ep_minibatch_and_ring(variant):
    problem = make_inputs(512, 384, 192, 16, 4, seed=8, skew=1.0)
    base = cuda_forward(problem, variant=variant)
    for ep_size in (1, 2, 4, 8):
        for config in (MoKConfig(), MoKConfig(minibatch_rows=128, ring_rows=128),
                       MoKConfig(minibatch_rows=256, ring_rows=768), MoKConfig(minibatch_rows=384)):
            out = cuda_forward(problem, ep_size=ep_size, config=config, variant=variant)
            assert_bitwise_equal(out, base, f"ep={ep_size} minibatch={config.minibatch_rows} ring={config.ring_rows}")


def test_poisoning_does_not_change_bits():
    problem = make_inputs(300, 256, 128, 8, 2, seed=9)
    poisoned = cuda_forward(problem, variant="pipelined", poison=True)
    clean = cuda_forward(problem, variant="pipelined", poison=False)
    assert bool(torch.isfinite(poisoned).all())
    assert_bitwise_equal(poisoned, clean, "poisoned vs clean buffers")


@pytest.mark.parametrize("down_tma", [False, True])
def test_cuda_graph_replay_matches_eager(down_tma):
    """A captured launch replays to the eager bits, with the push into the combine slots or the TMA down store (the
    warm-up launch makes either's buffers; the capture would refuse to)."""
    from mok.cuda.backend import check_error, launch, prepare
    problem = make_inputs(256, 256, 128, 8, 2, seed=10)
    eager = cuda_forward(problem, variant="pipelined")
    prep = prepare(*problem, config=MoKConfig(minibatch_rows=128, ring_rows=128), poison=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        launch(prep, variant="pipelined", down_tma=down_tma)  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    check_error(prep)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(prep, variant="pipelined", down_tma=down_tma)
    for _ in range(2):
        prep.out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        check_error(prep)
        assert_bitwise_equal(prep.out, eager, "graph replay")


# ------------------------------------------------------------------------------------------------------
# Errors and the public API
# ------------------------------------------------------------------------------------------------------

def test_inconsistent_schedule_reports_an_error_instead_of_hanging():
    from mok.cuda.backend import Sm90KernelError, check_error, launch, prepare
    problem = make_inputs(256, 256, 128, 8, 2, seed=11)
    prep = prepare(*problem)
    prep.schedule.tile_expert[0, 0] = -1  # a used tile without an expert
    launch(prep, variant="pipelined", timeout_s=5.0)
    with pytest.raises(Sm90KernelError, match="schedule"):
        check_error(prep)


def test_unsupported_sizes_are_rejected_with_a_clear_error():
    problem = make_inputs(64, 96, 64, 4, 1, seed=12)  # H = 96 is not a multiple of 64
    with pytest.raises(ValueError, match="multiple of 64"):
        cuda_forward(problem)


def test_mok_moe_cuda_backend_forward_equals_kernel():
    problem = make_inputs(256, 256, 128, 8, 2, seed=13)
    with torch.no_grad():
        out = mok.moe(*problem, backend="cuda", check_inputs=False)
    assert_bitwise_equal(out, cuda_forward(problem, variant="simple"), "mok.moe(backend='cuda')")


@pytest.mark.usefixtures("triton_backend")
def test_training_backward_through_triton():
    problem = make_inputs(256, 256, 128, 8, 2, seed=14)

    def forward_backward(backend):
        leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in problem]
        out = mok.moe(*leaves, backend=backend, check_inputs=False)
        grad = torch.randn(out.shape, generator=torch.Generator(device="cuda").manual_seed(1), device="cuda")
        out.backward(grad.to(out.dtype))
        return [out.detach()] + [leaves[j].grad for j in (0, 2, 3, 4, 5)]

    cuda, ref = forward_backward("cuda"), forward_backward("reference")
    for name, a, b in zip(["out", "dx", "d_topk_weights", "d_w_gate", "d_w_up", "d_w_down"], cuda, ref):
        assert a is not None and bool(torch.isfinite(a).all()), name
        assert rel_err(a, b) < 2e-2, f"{name}: relative error {rel_err(a, b):.3e}"


# ------------------------------------------------------------------------------------------------------
# Fused top-1 combine, workspaces, timing ablations
# ------------------------------------------------------------------------------------------------------

TOP1_CASES = {
    # name: (T, H, I, E, skew, ep_size)
    "basic": (256, 256, 128, 8, 0.0, 1),
    "h-not-256": (300, 320, 192, 4, 0.0, 1),   # ragged tokens, partial last column blocks
    "one-hot": (256, 256, 256, 8, 30.0, 1),     # (almost) everything on expert 0
    "ep4-skew": (512, 384, 128, 16, 2.0, 4),
}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", list(TOP1_CASES))
def test_fused_top1_combine_equals_unfused_bitwise(name, variant):
    t, h, i, e, skew, ep = TOP1_CASES[name]
    problem = make_inputs(t, h, i, e, 1, seed=20 + list(TOP1_CASES).index(name), skew=skew)
    fused = cuda_forward(problem, ep_size=ep, variant=variant, fuse_top1=True)
    unfused = cuda_forward(problem, ep_size=ep, variant=variant, fuse_top1=False)
    assert_bitwise_equal(fused, unfused, f"fused vs unfused top-1 combine ({name})")
    check_accuracy(fused, problem, ep_size=ep)


def test_reused_workspace_gives_the_same_bits():
    a = make_inputs(384, 256, 128, 8, 2, seed=30)
    b = make_inputs(384, 256, 128, 8, 2, seed=31)
    other = make_inputs(200, 320, 192, 4, 1, seed=32)
    first = cuda_forward(a, poison=False)
    cuda_forward(b, poison=False)           # same sizes: same workspace, other data
    cuda_forward(other, poison=False)       # other sizes: another workspace
    again = cuda_forward(a, poison=False)
    assert_bitwise_equal(again, first, "same problem after the workspace served others")
    fresh = cuda_forward(a, poison=True)
    assert_bitwise_equal(fresh, first, "poisoned workspace")


def test_layer_forward_never_synchronises(monkeypatch):
    """mok.moe(backend="cuda") with the deferred error check: no device synchronisation anywhere in a call."""
    from mok.cuda.backend import check_pending_errors
    monkeypatch.setenv("MOK_CUDA_CHECK", "deferred")
    problem = make_inputs(512, 256, 128, 8, 2, seed=33)
    with torch.no_grad():
        expected = mok.moe(*problem, backend="cuda", check_inputs=False)  # warm-up: extension, workspace
        check_pending_errors()
        previous = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            outs = [mok.moe(*problem, backend="cuda", check_inputs=False) for _ in range(3)]
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    check_pending_errors()
    for out in outs:
        assert_bitwise_equal(out, expected, "repeated layer calls")


@pytest.mark.parametrize("seed", range(6))
def test_kernel_schedule_equals_build_schedule_on_gpu(seed, monkeypatch):
    from mok.cuda.schedule_tables import build_kernel_schedule
    monkeypatch.delenv("MOK_CUDA_SCHEDULE_SORT", raising=False)  # the default sort (the counting one when small)
    tokens, experts, top_k, ranks = [(512, 8, 2, 1), (4096, 64, 8, 8), (32768, 256, 16, 1),
                                     (2048, 16, 4, 4), (16384, 6, 1, 1), (1024, 32, 1, 2)][seed]
    _, ids, *_ = make_inputs(tokens, 64, 64, experts, top_k, seed=40 + seed, skew=2.0 if seed % 2 else 0.0)
    if seed % 2:
        ids = ids.long()
    full = mok.build_schedule(ids, experts, ranks, tile=128)
    mine = build_kernel_schedule(ids, experts, ranks, tile=128)  # the extension's two kernels
    for name in ("src_rank", "src_slot", "segment_offsets", "tile_expert"):
        a, b = getattr(mine, name), getattr(full, name)
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), name


@pytest.mark.parametrize("experts", [1, 6, 8, 16, 17, 256, 512, 513, 1000, 1024])  # 16 | 17: match_any | ballots
def test_counting_sort_equals_the_stable_torch_sort(experts):
    """The extension's counting sort (csrc/schedule_tables.cu) gives torch.sort(ids, stable=True)'s values and order,
    at slot counts around its warps' steps and its CTAs' chunks (4,096 slots) and up to its limit, uniform and skewed
    (one hot expert, empty ones), with each expert's first sorted index (what torch.searchsorted finds in the sorted
    ids, the schedule tables' run_start); past its limits it is refused."""
    from mok.cuda.build import load_extension
    from mok.cuda.schedule_tables import EXPERT_SORT_MAX_EXPERTS, EXPERT_SORT_MAX_SLOTS
    ext = load_extension()
    gen = torch.Generator(device="cuda").manual_seed(experts)
    for slots in (1, 31, 32, 33, 255, 257, 511, 512, 513, 1000, 4095, 4096, 4097, 8191, 8192, 8193, 12288, 12345, 16384,
                  20480, 32768, 65536, 196608, 524288, EXPERT_SORT_MAX_SLOTS - 1, EXPERT_SORT_MAX_SLOTS):
        uniform = torch.randint(0, experts, (slots,), generator=gen, device="cuda", dtype=torch.int32)
        skewed = torch.where(torch.rand(slots, generator=gen, device="cuda") < 0.7, experts // 2, uniform)
        descending = torch.arange(slots, device="cuda", dtype=torch.int32).flip(0) % experts
        for ids in (uniform, skewed.to(torch.int32), descending):
            got = ext.expert_sort(ids, experts)
            want = torch.sort(ids, stable=True)
            assert torch.equal(got[0], want.values) and torch.equal(got[1], want.indices), (slots, experts)
            runs = torch.searchsorted(want.values, torch.arange(experts + 1, device="cuda", dtype=torch.int32))
            assert torch.equal(got[2], runs.to(torch.int32)), (slots, experts)
    # Ids outside [0, E) are clamped into it (no write goes astray), and a view at an odd int offset is read as is.
    wild = torch.randint(-5, experts + 5, (20001,), generator=gen, device="cuda", dtype=torch.int32)  # 5 CTAs
    got = ext.expert_sort(wild[1:], experts)
    want = torch.sort(wild[1:].clamp(0, experts - 1), stable=True)
    assert torch.equal(got[0], want.values) and torch.equal(got[1], want.indices)
    with pytest.raises(RuntimeError, match=f"expert_sort: needs 1..{EXPERT_SORT_MAX_SLOTS} slots .* got "
                                           f"{EXPERT_SORT_MAX_SLOTS + 1} and {experts}"):
        ext.expert_sort(torch.zeros(EXPERT_SORT_MAX_SLOTS + 1, dtype=torch.int32, device="cuda"), experts)
    with pytest.raises(RuntimeError, match=f"got 8 and {EXPERT_SORT_MAX_EXPERTS + 1}"):
        ext.expert_sort(torch.zeros(8, dtype=torch.int32, device="cuda"), EXPERT_SORT_MAX_EXPERTS + 1)


def test_binding_refusals_raise_with_their_numbers():
    """A failed check in csrc/binding.cpp raises RuntimeError naming the numbers and shapes, and the process lives on.
    Round 23 found a message that streamed an integer crashing the interpreter (SIGSEGV) on the H200 machine, so each
    kind of message is exercised: plain numbers, a tensor's shape, and a launch's checked argument."""
    from mok.cuda.backend import launch, prepare
    from mok.cuda.build import load_extension
    ext = load_extension()
    ids = torch.zeros(8, dtype=torch.int32, device="cuda")
    slots = torch.arange(8, device="cuda")
    with pytest.raises(RuntimeError, match=r"bad sizes \(experts 7, ranks 2, tile 128, capacity 128\)"):
        ext.schedule_tables(ids, slots, 7, 2, 128, 128, 8)
    with pytest.raises(RuntimeError, match=r"1-D of one length, got \[8\] and \[4\]"):
        ext.schedule_tables(ids, slots[:4].clone(), 8, 1, 128, 128, 8)
    with pytest.raises(RuntimeError, match=r"run_start must be 1-D of E \+ 1 = 9, got \[8\]"):
        ext.schedule_tables(ids, slots, 8, 1, 128, 128, 8, ids)
    prep = prepare(*make_inputs(256, 256, 128, 8, 2, seed=3))
    with pytest.raises(RuntimeError, match=r"trace must be \[tickets, \d+\] int64, got \[5, 3\]"):
        launch(prep, variant="pipelined", trace=torch.zeros(5, 3, dtype=torch.int64, device="cuda"))


@pytest.mark.parametrize("sort", ["counting", "torch"])
def test_kernel_schedule_with_either_sort_equals_build_schedule(sort, monkeypatch):
    """build_kernel_schedule's tables are build_schedule's whichever sort orders the slots (MOK_CUDA_SCHEDULE_SORT):
    the counting sort hands each expert's first index to the offsets kernel, after torch's the kernel searches."""
    from mok.cuda.schedule_tables import build_kernel_schedule
    monkeypatch.setenv("MOK_CUDA_SCHEDULE_SORT", sort)
    for tokens, experts, top_k, ranks in [(512, 8, 2, 1), (16384, 6, 1, 1), (2048, 64, 8, 4), (20480, 8, 1, 1),
                                          (1000, 768, 8, 2), (4096, 1024, 8, 8),  # E > 512: two rounds of the scan
                                          (2046, 99, 4, 3)]:  # 33 local experts: a warp's second step, in part
        _, ids, *_ = make_inputs(tokens, 64, 64, experts, top_k, seed=tokens + experts, skew=1.0)
        full = mok.build_schedule(ids, experts, ranks, tile=128)
        mine = build_kernel_schedule(ids, experts, ranks, tile=128)
        for name in ("src_rank", "src_slot", "segment_offsets", "tile_expert"):
            assert torch.equal(getattr(mine, name), getattr(full, name)), (sort, tokens, experts, name)


def test_deferred_error_check_reports_a_failed_launch():
    from mok.cuda.backend import Sm90KernelError, check_pending_errors, defer_error_check, launch, prepare
    check_pending_errors()
    problem = make_inputs(256, 256, 128, 8, 2, seed=34)
    prep = prepare(*problem)
    prep.schedule.tile_expert[0, 0] = -1  # a used tile without an expert
    launch(prep, variant="simple", timeout_s=5.0)
    defer_error_check(prep)
    with pytest.raises(Sm90KernelError, match="deferred"):
        check_pending_errors()
    check_pending_errors()  # reported once, then cleared


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("top_k", [1, 2])
def test_timing_ablations_run_to_completion(variant, top_k):
    from mok.cuda.backend import ABLATE_ALL, check_error, launch, prepare
    problem = make_inputs(384, 320, 192, 8, top_k, seed=35)
    expected = cuda_forward(problem, variant=variant)
    prep = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=128, ring_rows=128))
    for flags in range(ABLATE_ALL + 1):
        launch(prep, variant=variant, ablate=flags, timeout_s=5.0)
        check_error(prep)
    launch(prep, variant=variant)  # no ablation after the ablated runs: the real result again
    check_error(prep)
    assert_bitwise_equal(prep.out, expected, "after ablated launches")


# ------------------------------------------------------------------------------------------------------
# Dispatch modes: gather (A rows copied by the producer warpgroup) against ring (dispatch tasks + TMA)
# ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["basic", "tiny-hidden", "ragged-tokens", "empty-experts", "one-hot-expert", "wide"])
def test_gather_dispatch_equals_ring_bitwise(name, variant):
    """Same A rows, same GEMM order: the two modes must agree bit for bit, whatever the EP degree, ring size
    or CTA count (1 CTA: every task of the order runs on one SM, so a hand-off bug in the producer deadlocks)."""
    t, h, i, e, k, skew = SMALL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=100 + list(SMALL_SHAPES).index(name))
    ring = cuda_forward(problem, variant=variant, dispatch="ring")
    check_accuracy(ring, problem, with_oracle=False)
    small_ring = MoKConfig(minibatch_rows=128, ring_rows=128)
    for ep_size, config, num_ctas, prefetch, rows in ((1, None, 0, "0", "0"), (2, small_ring, 0, "2", "1"),
                                                      (4, None, 3, "8", "0"), (1, small_ring, 1, "0", "1")):
        with pytest.MonkeyPatch.context() as env:
            env.setenv("MOK_CUDA_GATHER_PREFETCH", prefetch)
            env.setenv("MOK_CUDA_GATHER_ROW_PREFETCH", rows)
            gathered = cuda_forward(problem, ep_size=ep_size, config=config, variant=variant, num_ctas=num_ctas,
                                    dispatch="gather")
        assert_bitwise_equal(gathered, ring, f"gather ep={ep_size} ring={config} ctas={num_ctas} prefetch={prefetch} "
                                             f"row prefetch={rows}")


def hand_off_cases(tokens: int, experts: int):
    """(EP degree, config, CTA count) runs for the hand-off tests: EP 1/2/4/8, the default ring and a one-minibatch
    ring, all CTAs, 3 and 1 (every task on one SM). Skips EP degrees that do not divide T and E."""
    small_ring = MoKConfig(minibatch_rows=128, ring_rows=128)
    for ep_size, config, num_ctas in ((1, None, 0), (2, small_ring, 0), (4, None, 3), (8, small_ring, 1)):
        if tokens % ep_size == 0 and experts % ep_size == 0:  # emulated ranks need both divisible
            yield ep_size, config, num_ctas


@pytest.mark.parametrize("name", ["basic", "ragged-tokens", "empty-experts", "one-hot-expert", "wide"])
def test_signal_warp_equals_consumer_signalling_bitwise(name):
    """The pipelined variant's ring mode signals finished tasks from a producer warp (MOK_CUDA_SIGNAL_WARP=1, the
    default) or from consumer thread 0: the same tasks, the same counters, so the same bits, whatever the EP degree
    (push counts per source rank), ring size or CTA count (1 CTA: the signal warp must free every task-queue slot
    or the producer waits forever)."""
    t, h, i, e, k, skew = SMALL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=200 + list(SMALL_SHAPES).index(name))
    for ep_size, config, num_ctas in hand_off_cases(t, e):
        outs = {}
        for signal_warp in ("0", "1"):
            with pytest.MonkeyPatch.context() as env:
                env.setenv("MOK_CUDA_SIGNAL_WARP", signal_warp)
                outs[signal_warp] = cuda_forward(problem, ep_size=ep_size, config=config, variant="pipelined",
                                                 num_ctas=num_ctas, dispatch="ring")
        assert_bitwise_equal(outs["1"], outs["0"], f"signal warp ep={ep_size} ring={config} ctas={num_ctas}")
    check_accuracy(outs["1"], problem, with_oracle=False)


@pytest.mark.parametrize("name", ["basic", "tiny-hidden", "ragged-tokens", "h-not-256", "one-hot-expert", "wide"])
def test_store_warps_equal_consumer_stores_bitwise(name):
    """The down tiles' rows and (bf16, round 38) the gate/up tiles' h rows stored by two producer warps
    (MOK_CUDA_STORE_WARPS=1, the default) or by the consumer warpgroups themselves: the same rows to the same slots
    and ring rows, so the same bits, output and saved gate/up rows alike,
    whatever the EP degree (push counts per source rank), ring size, CTA count (1 CTA: every hand-off between the
    consumers, the store warps and the signal warp on one SM), fused top-1 or not, bf16 or MXFP8."""
    from mok.cuda.backend import sm90_forward
    t, h, i, e, k, skew = SMALL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=300 + list(SMALL_SHAPES).index(name))
    precisions = ("bf16",) if name == "tiny-hidden" else ("bf16", "mxfp8")  # MXFP8 shapes as test_cuda_mxfp8's
    for precision in precisions:
        for ep_size, config, num_ctas in hand_off_cases(t, e):
            runs = {}
            for store_warps in ("0", "1"):
                with pytest.MonkeyPatch.context() as env:
                    env.setenv("MOK_CUDA_SIGNAL_WARP", "1")  # store warps need the signal warp
                    env.setenv("MOK_CUDA_DOWN_TMA", "0")  # and the push (down_tma stores by TMA)
                    env.setenv("MOK_CUDA_STORE_WARPS", store_warps)
                    runs[store_warps] = sm90_forward(*problem, ep_size=ep_size, config=config, variant="pipelined",
                                                     num_ctas=num_ctas, check=True, poison=True, dispatch="ring",
                                                     save_gate_up=True, precision=precision)
            what = f"store warps {precision} ep={ep_size} ring={config} ctas={num_ctas}"
            assert_bitwise_equal(runs["1"][0], runs["0"][0], what + " (output)")
            assert_bitwise_equal(runs["1"][1], runs["0"][1], what + " (saved gate/up rows)")
        if precision == "bf16":
            check_accuracy(runs["1"][0], problem, with_oracle=False)


# Shapes for the down span (MOK_CUDA_DOWN_SPAN): H of 2 and 4 column blocks, a partial last block, fused top-1,
# and I = 256 (4 K blocks, the stage count), where a span's later blocks reuse the A its first block landed.
SPAN_SHAPES = {"ragged-tokens": SMALL_SHAPES["ragged-tokens"], "h-not-256": SMALL_SHAPES["h-not-256"],
               "wide": SMALL_SHAPES["wide"], "one-hot-wide": (256, 512, 256, 8, 1, 30.0),
               "a-stays-4-blocks": (320, 1024, 256, 8, 4, 0.0), "a-stays-6-blocks": (256, 1536, 256, 8, 4, 0.0)}


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", list(SPAN_SHAPES))
def test_down_span_equals_one_block_per_task_bitwise(name, variant):
    """Down tasks of 2 to 6 column blocks (MOK_CUDA_DOWN_SPAN) compute the same blocks with the same arithmetic and
    push each row once per block, so outputs and saved gate/up rows are the same bits as one block per task, in
    both dispatch modes, whatever the EP degree (push counts per source rank), ring size or CTA count (1 CTA: every
    task on one SM; a producer and consumers that disagree on a task's blocks deadlock). At I = 256 a span's blocks
    after the first multiply the A that the first landed (produce_task): a stale or overwritten A shows here."""
    from mok.cuda.backend import sm90_forward
    t, h, i, e, k, skew = SPAN_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=350 + list(SPAN_SHAPES).index(name))
    blocks = -(-h // 256)
    for dispatch in ("ring", "gather"):
        for ep_size, config, num_ctas in hand_off_cases(t, e):
            runs = {}
            for span in [s for s in range(1, 9) if blocks % s == 0]:  # every span up to auto's widest
                with pytest.MonkeyPatch.context() as env:
                    env.setenv("MOK_CUDA_DOWN_SPAN", str(span))
                    runs[span] = sm90_forward(*problem, ep_size=ep_size, config=config, variant=variant,
                                              num_ctas=num_ctas, check=True, poison=True, dispatch=dispatch,
                                              save_gate_up=True)
            assert len(runs) > 1
            for span, (out, saved) in runs.items():
                what = f"down span {span} {dispatch} ep={ep_size} ring={config} ctas={num_ctas}"
                assert_bitwise_equal(out, runs[1][0], what + " (output)")
                assert_bitwise_equal(saved, runs[1][1], what + " (saved gate/up rows)")
    check_accuracy(runs[max(runs)][0], problem, with_oracle=False)


def test_down_span_must_divide_the_column_blocks():
    from mok.cuda import backend
    t, h, i, e, k, skew = SPAN_SHAPES["h-not-256"]  # 2 column blocks
    prep = backend.prepare(*make_inputs(t, h, i, e, k, skew=skew, seed=1))
    with pytest.raises(ValueError, match="down_span"):
        backend.launch(prep, down_span=3)
    with pytest.raises(ValueError, match="store_warps"):
        backend.launch(prep, variant="pipelined", dispatch="ring", down_span=2, store_warps=True)


def blocks_placed_early(prep) -> int:
    """Combine blocks the early-combine order placed before the kernel's last step (all ranks)."""
    rows_used = prep.schedule.segment_offsets[:, -1].long()
    last_step = int((rows_used + prep.minibatch_rows - 1).div(prep.minibatch_rows, rounding_mode="floor").max()) - 1
    return int(prep.combine_offsets[:, max(last_step, 0)].sum())


# The small shapes with combine tasks, and one with enough tokens and steps (ring of 128-row minibatches in
# hand_off_cases) that many blocks are placed before the last step; in the tiny ones nearly every 16-token block
# has a row in the last step.
EARLY_COMBINE_SHAPES = {name: SMALL_SHAPES[name] for name in ("basic", "ragged-tokens", "h-not-256", "empty-experts",
                                                               "wide")}
EARLY_COMBINE_SHAPES["many-steps"] = (2048, 256, 128, 16, 4, 0.0)


@pytest.mark.parametrize("name", list(EARLY_COMBINE_SHAPES))
def test_early_combine_equals_tail_combine_bitwise(name):
    """Each token's weighted sum run as soon as the step holding its last row is done (early combine, opt-in)
    or every sum after the last GEMM: the same arithmetic on the same slots, so the same bits, in both variants
    and dispatch modes, whatever the EP degree (steps shared by all ranks), ring size or CTA count (1 CTA: every
    combine block waits behind the down tasks of its own CTA). Poisoned slots and output: a block summed before
    its rows landed would show. "many-steps" must place blocks before the last step (else nothing was tested)."""
    from mok.cuda.backend import check_error, launch, prepare
    t, h, i, e, k, skew = EARLY_COMBINE_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=400 + list(EARLY_COMBINE_SHAPES).index(name))
    placed_early = 0
    for ep_size, config, num_ctas in hand_off_cases(t, e):
        prep = prepare(*problem, ep_size=ep_size, config=config, poison=True, early_combine=True)
        assert prep.combine_tokens is not None, "no early-combine order for a top-k > 1 layer"
        placed_early += blocks_placed_early(prep)
        for variant in VARIANTS:
            for dispatch in ("ring", "gather"):
                outs = {}
                # (early combine, down_tma): the early sums also read y through the table (combine.cuh).
                for early, down_tma in ((False, False), (True, False), (True, True)):
                    prep.out.fill_(float("nan"))
                    prep.workspace.poison()
                    outs[early, down_tma] = launch(prep, variant=variant, num_ctas=num_ctas, dispatch=dispatch,
                                                   early_combine=early, down_tma=down_tma).clone()
                    check_error(prep)
                what = f"early combine {variant} {dispatch} ep={ep_size} ring={config} ctas={num_ctas}"
                assert_bitwise_equal(outs[True, False], outs[False, False], what)
                assert_bitwise_equal(outs[True, True], outs[False, False], what + " down_tma")
    if name == "many-steps":
        assert placed_early > 0, "every combine block sat in the last step: the early path was not exercised"
    check_accuracy(outs[True, True], problem, with_oracle=False)


def test_timing_probes_run_to_completion():
    """The probe bits outside ABLATE_ALL ("stores", "release_reds") run without an error record, and
    "release_reds" changes no bit."""
    from mok.cuda.backend import PROBE, check_error, launch, prepare
    problem = make_inputs(384, 320, 192, 8, 2, seed=37)
    expected = cuda_forward(problem, variant="pipelined", dispatch="ring")
    prep = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=128, ring_rows=128))
    for flags in (PROBE["stores"], PROBE["release_reds"], PROBE["stores"] | PROBE["release_reds"]):
        for dispatch in ("ring", "gather"):
            launch(prep, variant="pipelined", ablate=flags, timeout_s=5.0, dispatch=dispatch)
            check_error(prep)
    launch(prep, variant="pipelined", ablate=PROBE["release_reds"], dispatch="ring")
    check_error(prep)
    assert_bitwise_equal(prep.out, expected, "release_reds probe")
    with pytest.raises(ValueError, match="bitmask"):
        launch(prep, ablate=64)


@pytest.mark.parametrize("dispatch", ["ring", "gather"])
def test_down_tma_writes_the_inverse_map(dispatch):
    """A down_tma launch's down tasks write the inverse map ((source rank, token * K + k) -> row of y) that its
    weighted sum reads: equal to y_rows_table's, entry for entry, over a -1-poisoned buffer, at EP 1 and 4 and with
    a span of several column blocks."""
    from mok.cuda.backend import check_error, launch, prepare, y_rows_table
    problem = make_inputs(384, 512, 128, 8, 4, seed=41)
    for ep_size in (1, 4):
        prep = prepare(*problem, ep_size=ep_size, poison=True)
        for span in (1, 2):
            prep.workspace.y_rows_buffer().fill_(-1)
            launch(prep, variant="pipelined", dispatch=dispatch, down_tma=True, down_span=span)
            check_error(prep)
            assert torch.equal(prep.workspace.y_rows, y_rows_table(prep.schedule)), f"ep={ep_size} span={span}"


@pytest.mark.parametrize("sum_kernel", [False, True])
def test_down_tma_reports_a_slot_that_no_row_holds(sum_kernel):
    """Two schedule rows naming one slot leave another (token, k) without a row while every push count still adds up,
    so the weighted sum runs (the bad-row test below stops before it). With down_tma it checks each inverse-map entry
    against the schedule tables, and reports the inconsistent schedule even though the lost entry still holds the row
    an earlier, valid launch wrote there (in range, so a range check alone would read it). So does the sum kernel."""
    from mok.cuda.backend import Sm90KernelError, check_error, launch, prepare
    problem = make_inputs(256, 256, 128, 8, 2, seed=43)
    prep = prepare(*problem)
    launch(prep, variant="pipelined", dispatch="gather", down_tma=True)  # a valid launch fills the inverse map
    check_error(prep)
    rows = (prep.schedule.src_rank[0] >= 0).nonzero().flatten()[:2].tolist()
    prep.schedule.src_slot[0, rows[1]] = prep.schedule.src_slot[0, rows[0]]  # rows[1]'s slot is now nobody's
    launch(prep, variant="pipelined", dispatch="gather", down_tma=True, timeout_s=5.0, sum_kernel=sum_kernel)
    with pytest.raises(Sm90KernelError, match="schedule"):
        check_error(prep)


@pytest.mark.parametrize("down_tma", [False, True])
def test_gather_dispatch_reports_a_bad_schedule_row(down_tma):
    """A row that names no slot is reported, not read or written out of bounds: by the gather, the push and, with
    down_tma, the weighted sum (the inverse map drops the row, so its (token, k) has none)."""
    from mok.cuda.backend import Sm90KernelError, check_error, launch, prepare
    problem = make_inputs(256, 256, 128, 8, 2, seed=36)
    prep = prepare(*problem)
    prep.schedule.src_slot[0, 0] = 10 ** 6  # a row that names no slot of its source rank
    launch(prep, variant="pipelined", timeout_s=5.0, dispatch="gather", down_tma=down_tma)
    with pytest.raises(Sm90KernelError, match="schedule"):
        check_error(prep)


# The small shapes (random routing: most have tiles with a padding half), and "short-last-tiles", whose routing is
# built so that every expert's last tile has 19 rows (token j -> experts j % 8 and (j + 1) % 8: 275 rows each).
SKIP_SHAPES = {name: SMALL_SHAPES[name] for name in ("basic", "tiny-hidden", "ragged-tokens", "h-not-256",
                                                      "empty-experts", "one-hot-expert", "wide")}
SKIP_SHAPES["short-last-tiles"] = (1100, 256, 192, 8, 2, 0.0)


@pytest.mark.parametrize("name", list(SKIP_SHAPES))
def test_skipping_padding_halves_changes_no_bit(name):
    """A tile whose rows 64..127 are all padding runs only the first consumer warpgroup's wgmma
    (MOK_CUDA_SKIP_PADDING_HALF, default on); the second keeps zero accumulators, which is what its zero rows
    give, so the output and the saved gate/up rows are the same bits as with both multiplying: both variants,
    both dispatch modes (bf16) and MXFP8 (ring), every EP degree, ring size and CTA count of hand_off_cases.
    Poisoned buffers: a skipped half whose epilogue did not run, or a stage released too early, would show."""
    from mok.cuda.backend import check_error, launch, prepare, saved_gate_up_buffer
    t, h, i, e, k, skew = SKIP_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=500 + list(SKIP_SHAPES).index(name))
    if name == "short-last-tiles":
        token = torch.arange(t, device=problem[1].device)
        ids = torch.stack([token % e, (token + 1) % e], dim=1).to(problem[1].dtype)
        problem = (problem[0], ids, *problem[2:])
    skipped = 0
    for precision in ("bf16", "mxfp8"):
        if precision == "mxfp8" and name == "tiny-hidden":
            continue  # as test_cuda_mxfp8's shapes
        for ep_size, config, num_ctas in hand_off_cases(t, e):
            prep = prepare(*problem, ep_size=ep_size, config=config, poison=True, precision=precision)
            skipped += prep.schedule.padding_half_tiles()[1]
            for variant in VARIANTS:
                for dispatch in (("ring", "gather") if precision == "bf16" else ("ring",)):
                    runs = {}
                    for skip in (False, True):
                        prep.out.fill_(float("nan"))
                        prep.workspace.poison()
                        saved = saved_gate_up_buffer(prep, poison=True)
                        out = launch(prep, variant=variant, num_ctas=num_ctas, dispatch=dispatch, saved_gate_up=saved,
                                     skip_padding_half=skip).clone()
                        check_error(prep)
                        runs[skip] = (out, saved)
                    what = (f"skip padding half {precision} {variant} {dispatch} ep={ep_size} ring={config} "
                            f"ctas={num_ctas}")
                    assert_bitwise_equal(runs[True][0], runs[False][0], what + " (output)")
                    assert_bitwise_equal(runs[True][1], runs[False][1], what + " (saved gate/up rows)")
            if precision == "bf16":
                check_accuracy(runs[True][0], problem, ep_size=ep_size, config=config, with_oracle=False)
    if name == "short-last-tiles":
        assert skipped > 0, "no tile had a padding half: the skip was not exercised"


def overlap_cases(tokens: int, experts: int):
    """(EP degree, config, CTA count) runs for the overlapped-steps tests (launch(overlap_steps=...),
    MOK_CUDA_OVERLAP_STEPS): EP 1/2/4/8 with rings of 2 and 3 one-tile minibatches (every step mixes one tile's
    gate/up tasks with the previous tile's down tasks) and the default ring, all CTAs, 3 and 1. Skips EP degrees that
    do not divide T and E."""
    two, three = MoKConfig(minibatch_rows=128, ring_rows=256), MoKConfig(minibatch_rows=128, ring_rows=384)
    for ep_size, config, num_ctas in ((1, two, 0), (2, None, 0), (4, three, 3), (8, two, 1)):
        if tokens % ep_size == 0 and experts % ep_size == 0:
            yield ep_size, config, num_ctas


def assert_switch_changes_no_bit(problem, env_name: str, cases, variant: str, what: str) -> torch.Tensor:
    """Runs the forward with environment switch ``env_name`` at 0 and at 1 in both dispatch modes for each (EP
    degree, config, CTA count) of ``cases``, poisoned, and asserts the same output and saved gate/up bits; returns
    the last output with the switch on."""
    from mok.cuda.backend import sm90_forward
    cases = list(cases)  # a generator (hand_off_cases) would be used up by the first dispatch mode
    assert cases, "no (EP degree, config, CTA count) case to run"
    for dispatch in ("ring", "gather"):
        for ep_size, config, num_ctas in cases:
            runs = {}
            for value in ("0", "1"):
                with pytest.MonkeyPatch.context() as env:
                    env.setenv(env_name, value)
                    runs[value] = sm90_forward(*problem, ep_size=ep_size, config=config, variant=variant,
                                               num_ctas=num_ctas, check=True, poison=True, dispatch=dispatch,
                                               save_gate_up=True)
            where = f"{what} {dispatch} ep={ep_size} ring={config} ctas={num_ctas}"
            assert_bitwise_equal(runs["1"][0], runs["0"][0], where + " (output)")
            assert_bitwise_equal(runs["1"][1], runs["0"][1], where + " (saved gate/up rows)")
    return runs["1"][0]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["basic", "ragged-tokens", "empty-experts", "one-hot-expert", "wide", "h-not-256"])
def test_overlapped_steps_equal_the_plain_order_bitwise(name, variant):
    """The overlapped-steps order (each step's gate/up tasks beside the previous step's down tasks, scheduler.cuh)
    runs the same tasks with the same arithmetic: outputs and saved gate/up rows are the same bits as the plain
    order in both dispatch modes, whatever the EP degree, ring or CTA count (1 CTA: a dependency on a later ticket
    would deadlock it, which the bounded waits report as an error)."""
    t, h, i, e, k, skew = SMALL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=450 + list(SMALL_SHAPES).index(name))
    out = assert_switch_changes_no_bit(problem, "MOK_CUDA_OVERLAP_STEPS", overlap_cases(t, e), variant,
                                       "overlapped steps")
    check_accuracy(out, problem, with_oracle=False)


def test_overlapped_steps_reorder_the_tasks_and_refuse_a_one_minibatch_ring():
    """With a ring of 2 minibatches the task timeline's kinds by ticket differ from the plain order's (the order did
    change) and hold the same tasks; a ring of one minibatch, where a step's gate/up tasks must wait for the previous
    step's down tasks, is refused when asked for and falls back to the plain order by default."""
    from mok.cuda.backend import TASK_KINDS, TRACE_FIELDS, check_error, launch, prepare, trace_buffer
    t, h, i, e, k, skew = SMALL_SHAPES["wide"]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=460)
    who = TRACE_FIELDS.index("who")
    prep = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=128, ring_rows=256), poison=True)
    kinds = {}
    for overlap in (False, True):
        trace = trace_buffer(prep)
        launch(prep, variant="pipelined", dispatch="gather", overlap_steps=overlap, trace=trace)
        check_error(prep)
        rows = trace.cpu()
        kinds[overlap] = [TASK_KINDS[int(v) & 0xFF] for v in rows[rows[:, who] >= 0, who]]
    assert sorted(kinds[True]) == sorted(kinds[False])
    assert kinds[True] != kinds[False], "overlap_steps=True ran the plain order"
    one = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=128, ring_rows=128), poison=True)
    with pytest.raises(ValueError, match="overlap_steps"):
        launch(one, overlap_steps=True)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MOK_CUDA_OVERLAP_STEPS", "1")
        launch(one, variant="pipelined")  # the plain order
        check_error(one)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["basic", "ragged-tokens", "empty-experts", "one-hot-expert", "wide", "h-not-256"])
def test_first_dispatch_in_parts_equals_one_task_per_tile_bitwise(name, variant):
    """The first minibatch's dispatch in parts (scheduler.cuh: each tile's rows in 3 or 8 tasks, or as many as give
    every CTA one) copies the same rows into the same ring rows: outputs and saved gate/up rows are the bits of one
    task per tile, bf16 and MXFP8 (whose dispatch dequantizes), whatever the EP degree, ring or CTA count; a part that
    missed rows would leave the poisoned ring rows in. That every gate/up task waits for all of its tile's parts is
    checked by the CPU replay of the task order (tests/test_cuda_compile.py): here a wait for too few parts would show
    only where a gate/up task can overtake its tile's last parts, which the producer's short lead rarely allows."""
    from mok.cuda.backend import sm90_forward
    t, h, i, e, k, skew = SMALL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=470 + list(SMALL_SHAPES).index(name))
    for precision in ("bf16", "mxfp8"):
        for ep_size, config, num_ctas in hand_off_cases(t, e):
            runs = {}
            for parts in ("1", "3", "8", "auto"):
                with pytest.MonkeyPatch.context() as env:
                    env.setenv("MOK_CUDA_FIRST_DISPATCH_PARTS", parts)
                    out = sm90_forward(*problem, ep_size=ep_size, config=config, variant=variant,
                                       num_ctas=num_ctas, check=True, poison=True, dispatch="ring",
                                       save_gate_up=precision == "bf16", precision=precision)
                    runs[parts] = out if isinstance(out, tuple) else (out,)  # (out, saved rows) for bf16
            for parts in ("3", "8", "auto"):
                where = f"{precision} parts={parts} ep={ep_size} ring={config} ctas={num_ctas}"
                for got, want, what in zip(runs[parts], runs["1"], ("output", "saved gate/up rows")):
                    assert_bitwise_equal(got, want, f"{where} ({what})")
        if precision == "bf16":
            check_accuracy(runs["auto"][0], problem, with_oracle=False)


def test_first_dispatch_parts_split_the_first_minibatch_only():
    """The task timeline holds one dispatch per tile plus (parts - 1) more per tile of the first minibatch; an
    out-of-range count is refused."""
    from mok.cuda.backend import TASK_KINDS, TRACE_FIELDS, check_error, launch, prepare, trace_buffer
    t, h, i, e, k, skew = SMALL_SHAPES["wide"]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=480)
    who = TRACE_FIELDS.index("who")
    prep = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=128, ring_rows=256), poison=True)
    tiles = (prep.schedule.segment_offsets[:, -1] // 128).tolist()
    first_tiles = sum(min(n, 1) for n in tiles)  # minibatches of one tile
    dispatches = {}
    for parts in (1, 5):
        trace = trace_buffer(prep)
        launch(prep, variant="pipelined", dispatch="ring", first_dispatch_parts=parts, trace=trace)
        check_error(prep)
        rows = trace.cpu()
        dispatches[parts] = sum(TASK_KINDS[int(v) & 0xFF] == "dispatch" for v in rows[rows[:, who] >= 0, who])
    assert dispatches[1] == sum(tiles)
    assert dispatches[5] == sum(tiles) + 4 * first_tiles
    with pytest.raises(ValueError, match="first_dispatch_parts"):
        launch(prep, first_dispatch_parts=9)


# Shapes for the ping-pong down task beyond SMALL_SHAPES: gather mode's auto span of 4 blocks with A kept in the stage
# ring (I = 256), and one K block per turn (I = 64).
PING_PONG_SHAPES = {
    **{name: SMALL_SHAPES[name] for name in ("basic", "ragged-tokens", "empty-experts", "wide", "h-not-256")},
    "span-4": (256, 1024, 256, 8, 2, 0.0),
    "i-64": (256, 256, 64, 8, 2, 0.0),
}


@pytest.mark.parametrize("span", ["auto", "1"])
@pytest.mark.parametrize("name", list(PING_PONG_SHAPES))
def test_down_ping_pong_equals_the_shared_down_block_bitwise(name, span, monkeypatch):
    """With down_tma forced on (MOK_CUDA_DOWN_TMA=1) and no signal warp (so ring mode runs it too), the ping-pong down
    task (MOK_CUDA_DOWN_PING_PONG: the consumer warpgroups take turns, each multiplying one 128-column half of a block
    over all 128 rows with m64n128k16) gives the same output and saved-row bits as both warpgroups multiplying each
    block together (m64n256k16), whatever the EP degree, ring, CTA count or down span (span 1: consecutive ping-pong
    tasks of one tile); y is poisoned. "ragged-tokens" has I = 192 (A reloaded per block), "h-not-256" a last block
    whose second half is past H, "empty-experts" tiles whose rows 64..127 are padding, "span-4" four blocks per task
    with A kept in the ring, "i-64" one K block per turn; "wide" (I = 512) cannot run it (a turn would need more
    stages than the ring holds) and checks that the default falls back. A spy on the launch's decision checks that
    ping-pong did run wherever it can."""
    import mok.cuda.backend as backend
    t, h, i, e, k, skew = PING_PONG_SHAPES[name]
    assert backend.down_ping_pong_allowed(True, "pipelined", False, i) == (i <= 256)
    decisions = []
    resolve = backend.resolve_down_ping_pong
    monkeypatch.setattr(backend, "resolve_down_ping_pong", lambda *a: decisions.append(resolve(*a)) or decisions[-1])
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=480 + list(PING_PONG_SHAPES).index(name))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MOK_CUDA_DOWN_TMA", "1")
        env.setenv("MOK_CUDA_SIGNAL_WARP", "0")
        env.setenv("MOK_CUDA_DOWN_SPAN", span)
        out = assert_switch_changes_no_bit(problem, "MOK_CUDA_DOWN_PING_PONG", hand_off_cases(t, e), "pipelined",
                                           "down ping-pong")
    # Each case runs the switch at 0 then 1, in ring then gather mode: half of the launches asked for it.
    assert decisions[1::2] == [i <= 256] * (len(decisions) // 2) and not any(decisions[0::2]), decisions
    check_accuracy(out, problem, with_oracle=False)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("name", ["basic", "ragged-tokens", "empty-experts", "wide", "h-not-256"])
def test_down_tma_equals_the_push_bitwise(name, variant):
    """down_tma (MOK_CUDA_DOWN_TMA: the down tiles leave by TMA into y in schedule order, the weighted sum reads
    through the inverse map) gives the same output bits as the push into the combine slots, in both dispatch modes,
    whatever the EP degree, ring, span or CTA count; y and the slots are poisoned first, so a row neither path
    wrote shows up. "h-not-256" has a last column block partly past H (a TMA box past H is not issued)."""
    t, h, i, e, k, skew = SMALL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=470 + list(SMALL_SHAPES).index(name))
    out = assert_switch_changes_no_bit(problem, "MOK_CUDA_DOWN_TMA", hand_off_cases(t, e), variant, "down_tma")
    check_accuracy(out, problem, with_oracle=False)


# ------------------------------------------------------------------------------------------------------
# The weighted sum as a kernel of its own (include/mok/weighted_sum.cuh)
# ------------------------------------------------------------------------------------------------------

# Shapes with combine tasks; "top-k-7" runs the k loop's remainder (7 = 4 + 3) and a last CTA of fewer than 4 tokens
# (T = 250 at EP 1 and 2), "top-k-16" anchor-2's top-k.
SUM_KERNEL_SHAPES = {name: SMALL_SHAPES[name] for name in ("basic", "ragged-tokens", "h-not-256", "empty-experts",
                                                            "wide")}
SUM_KERNEL_SHAPES["top-k-7"] = (250, 256, 128, 16, 7, 0.0)
SUM_KERNEL_SHAPES["top-k-16"] = (128, 512, 128, 32, 16, 0.0)


@pytest.mark.parametrize("name", list(SUM_KERNEL_SHAPES))
def test_sum_kernel_equals_the_combine_tasks_bitwise(name):
    """The weighted sum as a second kernel (sum_kernel=True) or as the megakernel's combine tasks: the same arithmetic
    on the same rows, so the same bits, reading the pushed slots or y through the inverse map (down_tma), in both
    variants and dispatch modes, at EP 1/2/4/8, two rings and 1, 3 or all CTAs. Slots, y and output poisoned: a sum
    that read a row before it landed, or an output element left unwritten, would show."""
    from mok.cuda.backend import check_error, launch, prepare
    t, h, i, e, k, skew = SUM_KERNEL_SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=500 + list(SUM_KERNEL_SHAPES).index(name))
    for ep_size, config, num_ctas in hand_off_cases(t, e):
        prep = prepare(*problem, ep_size=ep_size, config=config, poison=True)
        for variant in VARIANTS:
            for dispatch in ("ring", "gather"):
                for down_tma in (False, True):
                    outs = {}
                    for sum_kernel in (False, True):
                        prep.out.fill_(float("nan"))
                        prep.workspace.poison()
                        outs[sum_kernel] = launch(prep, variant=variant, num_ctas=num_ctas, dispatch=dispatch,
                                                  down_tma=down_tma, sum_kernel=sum_kernel).clone()
                        check_error(prep)
                    what = f"sum kernel {variant} {dispatch} down_tma={down_tma} ep={ep_size} ring={config} " \
                           f"ctas={num_ctas}"
                    assert_bitwise_equal(outs[True], outs[False], what)
    check_accuracy(outs[True], problem, with_oracle=False)


@pytest.mark.parametrize("variant", VARIANTS)
def test_sum_kernel_reports_a_row_that_was_never_pushed(variant):
    """A used row marked as padding is neither pushed nor counted: the combine tasks would time out waiting for its
    count; the sum kernel, which waits for nothing, finds the count short and reports the launch as failed instead of
    summing a stale slot. A valid launch of the same layer first, so the slots hold old rows."""
    from mok.cuda.backend import Sm90KernelError, check_error, launch, prepare
    prep = prepare(*make_inputs(256, 256, 128, 8, 2, seed=523))
    launch(prep, variant=variant, dispatch="ring", down_tma=False, sum_kernel=True)
    check_error(prep)
    prep.schedule.src_rank[0, 0] = -1  # row 0 of the first tile: a real row, now taken for padding
    launch(prep, variant=variant, dispatch="ring", down_tma=False, sum_kernel=True, timeout_s=5.0)
    with pytest.raises(Sm90KernelError, match="pushed"):
        check_error(prep)


def test_sum_kernel_through_the_environment_and_its_refusals():
    """MOK_CUDA_SUM_KERNEL=1 gives =0's bits through sm90_forward (both dispatch modes); a top-1 layer (fused combine:
    no sums), the early combine and a top-k above the kernel's table (64) refuse sum_kernel=True; auto then keeps the
    combine tasks."""
    from mok.cuda.backend import check_error, launch, prepare, sm90_forward
    problem = make_inputs(256, 256, 128, 8, 4, seed=520)
    assert_switch_changes_no_bit(problem, "MOK_CUDA_SUM_KERNEL", [(2, None, 0)], "pipelined", "MOK_CUDA_SUM_KERNEL")
    with pytest.raises(ValueError, match="sum_kernel"):
        launch(prepare(*make_inputs(256, 256, 128, 8, 1, seed=521)), sum_kernel=True)
    with pytest.raises(ValueError, match="sum_kernel"):
        launch(prepare(*problem, early_combine=True), early_combine=True, sum_kernel=True)
    wide = prepare(*make_inputs(128, 64, 64, 72, 65, seed=522))
    launch(wide, dispatch="ring")  # the combine tasks take any top-k: auto leaves the sum kernel out
    check_error(wide)
    with pytest.raises(ValueError, match="top-k at most 64"):
        launch(wide, dispatch="ring", sum_kernel=True)
