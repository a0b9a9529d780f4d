"""MXFP8 in the Triton pipeline (``mok.moe(..., backend="triton", precision="mxfp8")``), forward and backward.

Kernels: packed rows round-trip bit for bit against the PyTorch quantizer; the pull moves packed rows; the
MXFP8 gate/up + SwiGLU and down-dgrad + SwiGLU-backward kernels equal their BF16 twins run on the dequantized
operands bit for bit (same MMA chain; h quantized along I in the epilogue); the MXFP8 GEMM's push epilogue
writes exactly the rows it would store.

Layer: against (a) the MXFP8 semantics spelled out in PyTorch (every quantization point of
mok/triton_ref/mxfp8_rows.py, products in fp64), tightly; (b) the fp64 oracle with MoK's MXFP8 tolerances
(relative L1 <= 0.1, max abs <= 1.0 on the output; mok.validate.TOLERANCE["mxfp8"] on every output) and a
gradient cosine-similarity bound; (c) the BF16 Triton backend. Bitwise determinism across runs, EP degrees and
ring sizes (with backward replay); empty experts; the quantized-weight cache (requantizes after an in-place
update, and not otherwise); ``python -m mok validate --precision mxfp8``. Every buffer is poisoned first.
CPU under TRITON_INTERPRET=1 (set here when there is no GPU), or CUDA when present.
"""

from __future__ import annotations

import pytest
import torch

from conftest import INTERPRET, TRITON_DEVICE as DEVICE  # the interpreter without a GPU
from conftest import OUTPUT_NAMES, assert_all_bitwise, assert_bitwise_equal, bits, cosine, make_problem, rel_err, run_layer

import mok
from mok.comm import EmulatedPeers
from mok.config import MoEShape, MoKConfig
from mok.mxfp8 import MXFP8Weights, dequantize_torch, quantize_torch, weight_cache
from mok.schedule import build_schedule
from mok.transfers import pull_rows
from mok.triton_ref import mxfp8_gemm, mxfp8_rows, pull_dispatch, push_combine, swiglu
from mok.validate import TOLERANCE

TILE = 16
CONFIG = MoKConfig(expert_padding=TILE)
SHAPE = MoEShape("mx-tiny", 64, 64, 32, 8, 2)       # H, I multiples of the 32-element MX block
SMALL = MoEShape("mx-small", 32, 32, 32, 4, 2)      # for the many-run tests (the interpreter pays per program)
T, H, I, E, K = SHAPE.tokens, SHAPE.hidden, SHAPE.intermediate, SHAPE.num_experts, SHAPE.top_k

# Measured on this problem (CPU interpreter): relative error vs the fp64 oracle 0.060-0.074 on every output,
# gradient cosine similarity >= 0.9973 (0.9964 worst over three shapes x three seeds); vs the PyTorch spelling
# of the same MXFP8 semantics (mxfp8_rows.mxfp8_moe_torch) 3.5e-8 on the output, 1e-7 on the router-weight
# gradient (fp32 summation order) and 0 on the other gradients. Leaving out any one quantization point (x, h,
# dO or [d_gate|d_up]) moves the outputs it feeds to 2.8e-2 or more, so the bound below leaves room for
# rounding flips on other devices, not for a wrong quantization point.
VS_SEMANTICS = 5e-3
MIN_GRAD_COSINE = 0.995


pytestmark = pytest.mark.usefixtures("poisoned_triton_buffers")


def problem(shape=SHAPE, seed=0, skew=0.0):
    return make_problem(shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k,
                        dtype=torch.bfloat16, device=DEVICE, seed=seed, skew=skew)


def mx_layer(p, **kw):
    kw.setdefault("config", CONFIG)
    return run_layer("triton", p, precision="mxfp8", **kw)


def schedule_window(ep_size=1, rank=0, seed=0):
    """A routed problem's window of one rank's table (starting one tile in) and the rows in use in it."""
    p = problem(seed=seed)
    sched = build_schedule(p[1], E, ep_size, TILE)
    table = sched.rank(rank)
    start = TILE
    n_rows = table.capacity - start
    used = max(table.rows_used() - start, 0)
    return p, table, start, n_rows, used


def window_values(table, start, n_rows, used, width, seed):
    """Rows as a dispatch leaves them: random real rows, zero padding rows, NaN past the rows in use."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(n_rows, width, generator=gen).to(DEVICE, torch.bfloat16)
    rows[table.src_rank[start:start + n_rows] < 0] = 0
    rows[used:] = float("nan")
    return rows


def packed_rows(values: torch.Tensor) -> torch.Tensor:
    """Packed rows of ``values`` made by the PyTorch reference quantizer (pad bytes 0xFF)."""
    q = quantize_torch(values)
    k = values.shape[1]
    out = torch.full((values.shape[0], mxfp8_rows.packed_width(k)), 0xFF, dtype=torch.uint8, device=DEVICE)
    out[:, :k] = q.data.view(torch.uint8)
    out[:, k:k + k // 32] = q.scales
    return out


# ==========================================================================================================
# Packed rows and their transfer
# ==========================================================================================================
def test_packed_rows_round_trip_bitwise_and_layout():
    assert mxfp8_rows.packed_width(7168) == 7392 and mxfp8_rows.packed_width(64) == 80
    assert mxfp8_rows.packed_width(7168) < 2 * 7168 / 1.9, "a packed row is about half a bf16 row"
    values = (torch.randn(40, 96, generator=torch.Generator().manual_seed(1)) *
              torch.exp2(torch.randint(-8, 8, (40, 1), generator=torch.Generator().manual_seed(2)).float()))
    values = values.to(DEVICE, torch.bfloat16)
    got = mxfp8_rows.pack_rows(values)
    want = packed_rows(values)
    assert_bitwise_equal(got[:, :99], want[:, :99], "codes and scales of packed rows")
    out = torch.full((40, 96), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    mxfp8_rows.unpack_rows(got, 96, out)
    assert_bitwise_equal(out, dequantize_torch(quantize_torch(values), torch.bfloat16), "unpacked rows")
    # A device-side row limit: programs wholly past the rows in use leave their rows alone.
    limit = torch.tensor([TILE + 16], dtype=torch.int32, device=DEVICE)
    partial = torch.full_like(got, 0xAB)
    mxfp8_rows.pack_rows(values, partial, rows_in_use=limit, window_start=TILE)
    assert_bitwise_equal(partial[:16, :99], want[:16, :99], "rows in use")
    assert bool((partial[32:] == 0xAB).all()), "rows past the limit must stay untouched"


def test_pull_moves_packed_rows():
    p, table, start, n_rows, used = schedule_window(ep_size=2, rank=1)
    peers = EmulatedPeers(2, DEVICE)
    src = peers.buffer("x", (T // 2, mxfp8_rows.packed_width(H)), torch.uint8)
    for r, view in enumerate(src.views):
        view.copy_(mxfp8_rows.pack_rows(p[0][r * T // 2:(r + 1) * T // 2]))
    want = torch.empty(n_rows, src.shape[1], dtype=torch.uint8, device=DEVICE)
    pull_rows(table, start, start + n_rows, src, want, by_token=True)
    got = torch.full_like(want, 0xFF)
    pull_dispatch.pull_token_rows(table, start, n_rows, src, got)
    assert_bitwise_equal(got[:used], want[:used], "pulled packed rows")
    padding = (table.src_rank[start:start + used] < 0).nonzero().reshape(-1)
    assert padding.numel() and bool((got[padding] == 0).all()), "padding rows are all-zero bytes (value 0)"


# ==========================================================================================================
# MXFP8 kernels == their BF16 twins on the dequantized operands
# ==========================================================================================================
def assert_twin(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """The MXFP8 kernel vs its BF16 twin on the same (dequantized) values: the same MMA chain, bit for bit in
    the interpreter. On a GPU the two kernels feed the tensor cores from registers vs shared memory, which
    Triton may lower to different MMA sequences, so there only closeness is required."""
    assert not bool(torch.isnan(got).any()), f"{what}: NaN"
    if INTERPRET:
        assert_bitwise_equal(got, want, what)
    else:
        assert rel_err(got, want) < 1e-3, f"{what}: {rel_err(got, want):.2e}"


def test_gate_up_swiglu_mxfp8_is_bf16_kernel_on_dequantized_operands():
    p, table, start, n_rows, used = schedule_window()
    qw = MXFP8Weights.quantize(p[3], p[4], p[5], cache=False)
    x = window_values(table, start, n_rows, used, H, seed=3)
    x_packed = mxfp8_rows.pack_rows(torch.nan_to_num(x))
    tile_expert = table.tile_expert[start // TILE:]
    gate_up = torch.full((n_rows, 2 * I), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    h_packed = torch.full((n_rows, mxfp8_rows.packed_width(I)), 0xFF, dtype=torch.uint8, device=DEVICE)
    swiglu.gate_up_swiglu_mxfp8(mxfp8_rows.packed(x_packed, H), qw.gate_up_fwd, tile_expert, TILE,
                                gate_up_out=gate_up, h_out=mxfp8_rows.packed(h_packed, I))

    x_deq = torch.empty(n_rows, H, dtype=torch.bfloat16, device=DEVICE)
    mxfp8_rows.unpack_rows(x_packed, H, x_deq)
    w_gu = dequantize_torch(qw.gate_up_fwd, torch.bfloat16)
    want_gu = torch.full_like(gate_up, float("nan"))
    want_h = torch.full((n_rows, I), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    swiglu.gate_up_swiglu(x_deq, w_gu[:, :I].contiguous(), w_gu[:, I:].contiguous(), tile_expert, TILE,
                          gate_up_out=want_gu, h_out=want_h)
    assert_twin(gate_up[:used], want_gu[:used], "gate_up")
    assert bool(torch.isnan(gate_up[used:]).all()), "tiles past the rows in use must not be written"
    h_values = torch.empty(used, I, dtype=torch.bfloat16, device=DEVICE)
    mxfp8_rows.unpack_rows(h_packed[:used], I, h_values)
    assert_twin(h_values, dequantize_torch(quantize_torch(want_h[:used]), torch.bfloat16),
                "h quantized along I in the epilogue")
    if INTERPRET:
        assert_bitwise_equal(h_packed[:used, :I + I // 32], packed_rows(want_h[:used])[:, :I + I // 32], "h codes")


def test_down_dgrad_swiglu_mxfp8_is_bf16_kernel_on_dequantized_operands():
    p, table, start, n_rows, used = schedule_window(seed=1)
    qw = MXFP8Weights.quantize(p[3], p[4], p[5], cache=False)
    d_out = torch.nan_to_num(window_values(table, start, n_rows, used, H, seed=4))
    gen = torch.Generator().manual_seed(5)
    gate_up = torch.randn(n_rows, 2 * I, generator=gen).to(DEVICE, torch.bfloat16)
    weight = torch.rand(n_rows, generator=gen).to(DEVICE)
    weight[table.src_rank[start:start + n_rows] < 0] = 0
    tile_expert = table.tile_expert[start // TILE:]
    d_packed = mxfp8_rows.pack_rows(d_out)
    d_deq = torch.empty(n_rows, H, dtype=torch.bfloat16, device=DEVICE)
    mxfp8_rows.unpack_rows(d_packed, H, d_deq)
    w_down = dequantize_torch(qw.down_dgrad, torch.bfloat16).transpose(1, 2).contiguous()   # [E, H, I]

    outs = {}
    for mx in (True, False):
        parts = swiglu.router_grad_partials(I, H, torch.bfloat16, TILE, mx=mx)
        outs[mx] = (torch.full((n_rows, 2 * I), float("nan"), dtype=torch.bfloat16, device=DEVICE),
                    torch.full((n_rows, I), float("nan"), dtype=torch.bfloat16, device=DEVICE),
                    torch.full((n_rows, parts), float("nan"), device=DEVICE))
        d_gu, hw, partial = outs[mx]
        if mx:
            swiglu.down_dgrad_swiglu_backward_mxfp8(mxfp8_rows.packed(d_packed, H), qw.down_dgrad, weight, gate_up,
                                                    tile_expert, TILE, d_gate_up_out=d_gu, hw_out=hw,
                                                    dw_partial_out=partial)
        else:
            swiglu.down_dgrad_swiglu_backward(d_deq, w_down, weight, gate_up, tile_expert, TILE,
                                              d_gate_up_out=d_gu, hw_out=hw, dw_partial_out=partial)
    for name, got, want in zip(("d_gate_up", "w*h"), outs[True], outs[False]):
        assert_twin(got[:used], want[:used], name)
    # The router gradient: the partials' sum (how many partials there are is each kernel's tile choice).
    assert_twin(outs[True][2][:used].sum(1), outs[False][2][:used].sum(1), "router gradient")
    if INTERPRET:
        assert_bitwise_equal(outs[True][2][:used], outs[False][2][:used], "router partials")


def test_mxfp8_gemm_push_writes_the_rows_it_would_store():
    p, table, start, n_rows, used = schedule_window(ep_size=2, rank=0, seed=2)
    qw = MXFP8Weights.quantize(p[3], p[4], p[5], cache=False).experts(0, E // 2)
    h_packed = mxfp8_rows.pack_rows(torch.nan_to_num(window_values(table, start, n_rows, used, I, seed=6)))
    a = mxfp8_rows.packed(h_packed, I)
    tile_expert = table.tile_expert[start // TILE:]
    stored = mxfp8_gemm.mxfp8_grouped_gemm(a, qw.down_fwd, tile_expert, TILE, out_dtype=torch.bfloat16)
    peers = EmulatedPeers(2, DEVICE)
    slots = peers.buffer("slots", (T // 2 * K, H), torch.bfloat16)
    for view in slots.views:
        view.fill_(float("nan"))
    result = mxfp8_gemm.mxfp8_grouped_gemm(a, qw.down_fwd, tile_expert, TILE,
                                           push=push_combine.SlotPush.window(table, start, slots))
    assert result is None
    src_rank = table.src_rank[start:start + used].long()
    src_slot = table.src_slot[start:start + used].long()
    real = (src_rank >= 0).nonzero().reshape(-1)
    for r in range(2):
        mine = real[src_rank[real] == r]
        assert_bitwise_equal(slots[r][src_slot[mine]], stored[mine], f"pushed rows of rank {r}")
        untouched = torch.ones(T // 2 * K, dtype=torch.bool, device=DEVICE)
        untouched[src_slot[mine]] = False
        assert bool(torch.isnan(slots[r][untouched]).all()), "only the window's real slots are written"


# ==========================================================================================================
# The layer
# ==========================================================================================================
def mxfp8_semantics(p, grad_seed=1):
    """:func:`mok.triton_ref.mxfp8_rows.mxfp8_moe_torch` with run_layer's output gradient."""
    grad = torch.randn(p[0].shape, generator=torch.Generator().manual_seed(grad_seed)).to(DEVICE, torch.bfloat16)
    return mxfp8_rows.mxfp8_moe_torch(*p, grad)


@pytest.fixture(scope="module")
def layer_results():
    p = problem()
    return p, mx_layer(p), run_layer("oracle", p)


def test_backend_registers_mxfp8():
    assert "mxfp8" in mok.get_backend("triton").precisions


def test_layer_matches_mxfp8_semantics(layer_results):
    p, got, _ = layer_results
    for name, g, want in zip(OUTPUT_NAMES, got, mxfp8_semantics(p)):
        assert not bool(torch.isnan(g).any()), f"{name}: NaN (an unwritten poisoned element?)"
        assert g.dtype == (torch.float32 if name == "d_topk_weights" else torch.bfloat16), name
        err = rel_err(g, want)
        assert err < VS_SEMANTICS, f"{name}: {err:.3e} from the MXFP8 semantics"


def test_layer_vs_fp64_oracle_with_mok_tolerances(layer_results):
    _, got, oracle = layer_results
    out, want = got[0].double(), oracle[0]
    rel_l1 = float((out - want).abs().sum() / want.abs().sum())
    max_abs = float((out - want).abs().max())
    print(f"\nMXFP8 layer vs fp64 oracle: output relative L1 {rel_l1:.4f}, max abs {max_abs:.4f}")
    assert rel_l1 <= 0.1 and max_abs <= 1.0
    assert rel_l1 > 1e-2, "suspiciously exact: is MXFP8 quantization happening?"
    for name, g, o in zip(OUTPUT_NAMES, got, oracle):
        err, cos = rel_err(g, o), cosine(g, o)
        print(f"  {name:<15} relative error {err:.4f}  cosine {cos:.6f}")
        assert err <= TOLERANCE["mxfp8"], f"{name}: relative error {err:.3e}"
        assert cos >= MIN_GRAD_COSINE, f"{name}: cosine similarity {cos:.6f}"


def test_layer_close_to_bf16_backend(layer_results):
    p, got, _ = layer_results
    bf16 = run_layer("triton", p, config=CONFIG)
    for name, g, b in zip(OUTPUT_NAMES, got, bf16):
        assert rel_err(g, b) < TOLERANCE["mxfp8"], name
        assert cosine(g, b) >= MIN_GRAD_COSINE, name


@pytest.fixture(scope="module")
def small_results():
    p = problem(SMALL)
    return p, mx_layer(p)


def test_bitwise_across_runs_ep_degrees_and_rings(small_results):
    p, base = small_results
    assert_all_bitwise(mx_layer(p), base, "repeated run")
    # EP 2 in one minibatch; EP 2 through 16-row minibatches in a 32-row ring (the backward replays).
    for ep_size, mb, ring in ((2, None, None), (2, 16, 32)):
        cfg = CONFIG.replace(minibatch_rows=mb, ring_rows=ring)
        assert_all_bitwise(mx_layer(p, ep_size=ep_size, config=cfg), base, f"EP {ep_size}, minibatch {mb}, ring {ring}")


def test_empty_experts_and_a_rank_without_rows():
    p = problem(SMALL, skew=6.0)   # experts 0 and 1 take everything: rank 1 of EP 2 receives no row
    e = SMALL.num_experts
    counts = torch.bincount(p[1].reshape(-1).long(), minlength=e)
    empty = (counts == 0).nonzero().reshape(-1).tolist()
    assert int(counts[e // 2:].sum()) == 0
    got = mx_layer(p, ep_size=2)
    for name, g, want in zip(OUTPUT_NAMES, got, mxfp8_semantics(p)):
        assert rel_err(g, want) < VS_SEMANTICS, name
    for name, grad in zip(OUTPUT_NAMES[3:], got[3:]):
        assert bool((bits(grad[empty]) == 0).all()), f"{name}: empty experts must get +0.0"


def cached_weights(wg, wu, wd) -> MXFP8Weights:
    return weight_cache().entries[(id(wg), id(wu), id(wd))].weights


def assert_same_weights(a: MXFP8Weights, b: MXFP8Weights, what: str) -> None:
    for name in ("gate_up_fwd", "down_fwd"):
        qa, qb = getattr(a, name), getattr(b, name)
        assert torch.equal(qa.data.view(torch.uint8), qb.data.view(torch.uint8)), f"{what}: {name} codes"
        assert torch.equal(qa.scales, qb.scales), f"{what}: {name} scales"


def test_weight_cache_requantizes_only_after_an_update(small_results):
    p, trained = small_results
    x, ids, w = p[:3]
    wg, wu, wd = (t.clone().requires_grad_(True) for t in p[3:])
    cache = weight_cache()

    def forward():
        with torch.no_grad():
            return mok.moe(x, ids, w, wg, wu, wd, backend="triton", precision="mxfp8", config=CONFIG)

    before = cache.quantizations
    first = forward()
    assert cache.quantizations == before + 1
    assert_bitwise_equal(first, trained[0], "forward-only run vs training run")
    again = forward()
    assert cache.quantizations == before + 1, "unchanged weights must not be requantized"
    assert_bitwise_equal(again, first, "cached weights")
    assert MXFP8Weights.quantize(wg, wu, wd, for_backward=False) is cached_weights(wg, wu, wd)
    assert cache.quantizations == before + 1, "an explicit call hits the same cache"

    with torch.no_grad():   # what an optimizer step does: an in-place update bumps the version counter
        wg.mul_(1.5)
    updated = forward()
    assert cache.quantizations == before + 2, "an in-place update must trigger a requantization"
    assert_same_weights(cached_weights(wg, wu, wd), MXFP8Weights.quantize(wg, wu, wd, cache=False),
                        "requantized weights")
    assert not torch.equal(bits(updated), bits(first))
    assert MXFP8Weights.quantize(wg, wu, wd).has_backward   # backward orientations added on demand
    assert cache.quantizations == before + 3
    del wg
    assert len([k for k in cache.entries if k[1:] == (id(wu), id(wd))]) == 0, "freed weights leave the cache"


def test_mxfp8_input_errors():
    x, ids, w, wg, wu, wd = problem()
    with pytest.raises(TypeError, match="needs x of dtype torch.bfloat16"):
        mok.moe(x.float(), ids, w, wg.float(), wu.float(), wd.float(), backend="triton", precision="mxfp8")
    odd = make_problem(32, 48, 32, 4, 2, dtype=torch.bfloat16, device=DEVICE)
    with pytest.raises(ValueError, match="multiples of 32"):
        mok.moe(*odd, backend="triton", precision="mxfp8", config=CONFIG)


def test_validate_cli_mxfp8(capsys):
    from mok.cli import main
    rc = main(["validate", "--precision", "mxfp8", "--dtype", "bf16", "--backend", "triton", "--shape",
               "32,32,32,4,2", "--ep", "1"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "precision=mxfp8" in text and "PASS" in text and "DIFFERENT" not in text


def test_rank_run_through_a_peer_group_matches_the_emulated_run(small_results):
    """TritonRankRun, the per-process run of distributed_moe(backend="triton"), here with a one-rank peer
    group in this process: x and dO quantized into the group's buffers, republished for the replaying ring's
    backward, router-gradient slots copied out; the same bits as mok.moe."""
    from mok.triton_ref.pipeline import TritonRankRun
    p, _ = small_results
    cfg = CONFIG.replace(minibatch_rows=16, ring_rows=32)
    run = TritonRankRun(p[0], p[1], p[2].float(), *p[3:], rank=0, world=1, num_experts=SMALL.num_experts,
                        config=cfg, peers=EmulatedPeers(1, DEVICE), precision="mxfp8")
    assert any(plan.num_minibatches > plan.num_slots for plan in run.all_plans), "the ring must replay"
    out = run.forward()
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE, out.dtype)
    got = [out, *run.backward(grad)]
    assert_all_bitwise(got, mx_layer(p, config=cfg), "TritonRankRun vs mok.moe")
