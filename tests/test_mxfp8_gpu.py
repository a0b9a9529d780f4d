"""MXFP8 on the GPU at realistic sizes: quantize/dequantize kernels bitwise vs the PyTorch reference, the grouped
GEMM vs an fp64 product of the dequantized operands (all four weight orientations), bitwise determinism, and
the measured MXFP8-vs-BF16 error of an expert forward and its dgrads (printed; run with ``-s`` to see it).

Run on the H200:  python -m pytest -q -s tests/test_mxfp8_gpu.py tests/test_mxfp8.py
(tests/test_mxfp8.py then runs its CPU cases on CUDA with the compiled kernels.)
"""

from __future__ import annotations

import pytest
import torch

from mok.backends.reference import ieee_fp32_matmul
from mok.mxfp8 import MX_BLOCK, MXFP8Tensor, MXFP8Weights, dequantize, dequantize_torch, quantize, quantize_torch
from test_mxfp8 import assert_same_quantization, assert_same_values

pytestmark = pytest.mark.gpu

ROWS, EXPERTS, HIDDEN, INTER, TILE = 4096, 8, 7168, 2048, 128


def randn(*shape, seed, scale=1.0, dtype=torch.bfloat16):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(dtype)


@pytest.fixture(scope="module")
def weights():
    w_gate = randn(EXPERTS, INTER, HIDDEN, seed=1, scale=HIDDEN ** -0.5)
    w_up = randn(EXPERTS, INTER, HIDDEN, seed=2, scale=HIDDEN ** -0.5)
    w_down = randn(EXPERTS, HIDDEN, INTER, seed=3, scale=INTER ** -0.5)
    return w_gate, w_up, w_down, MXFP8Weights.quantize(w_gate, w_up, w_down)


@pytest.fixture(scope="module")
def routing():
    """Uneven segments over the experts (one empty), each padded to TILE; padding rows hold zeros."""
    counts = [700, 0, 1000, 300, 129, 890, 481, 230]
    assert sum(-(-c // TILE) * TILE for c in counts) <= ROWS
    tile_expert, real_rows = [], torch.zeros(ROWS, dtype=torch.bool)
    row = 0
    for expert, count in enumerate(counts):
        tiles = -(-count // TILE)
        tile_expert += [expert] * tiles
        real_rows[row:row + count] = True
        row += tiles * TILE
    tile_expert += [-1] * (ROWS // TILE - len(tile_expert))
    return torch.tensor(tile_expert, dtype=torch.int32, device="cuda"), real_rows.cuda()


# ======================================================================================================
# Quantize / dequantize kernels vs the PyTorch reference, bit for bit
# ======================================================================================================
def test_quantize_activations_bitwise():
    x = randn(ROWS, HIDDEN, seed=4) * torch.exp2(randn(ROWS, 1, seed=5, dtype=torch.float32) * 8).bfloat16()
    q = quantize(x)
    assert_same_quantization(q, quantize_torch(x), "x [4096, 7168] bf16")
    for dtype in (torch.float32, torch.bfloat16):
        assert_same_values(dequantize(q, dtype), dequantize_torch(q, dtype), f"dequantize x {dtype}")


def test_quantize_weights_both_orientations_bitwise(weights):
    w_gate, _, w_down, qw = weights
    assert_same_quantization(quantize(w_gate, dim=2), quantize_torch(w_gate, dim=2), "w_gate along H")
    assert_same_quantization(quantize(w_down, dim=1), quantize_torch(w_down, dim=1), "w_down along H")
    assert_same_quantization(qw.down_dgrad, quantize_torch(w_down.transpose(1, 2).contiguous(), dim=2),
                             "down_dgrad")


def test_quantize_extremes_bitwise():
    gen = torch.Generator(device="cuda").manual_seed(6)
    x = torch.randn(512, 1024, generator=gen, device="cuda")
    x = x * torch.exp2(torch.randint(-150, 127, (512, 1024 // MX_BLOCK), generator=gen, device="cuda").float()
                       ).repeat_interleave(MX_BLOCK, dim=1)
    x[0, :7] = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-45, 3.0e38])
    x[1] = 0.0
    x[2] = 1e-40                                                  # fp32 subnormals
    q = quantize(x)
    assert_same_quantization(q, quantize_torch(x), "extremes fp32")
    assert int(q.scales.max()) < 255
    for dtype in (torch.float32, torch.bfloat16):
        assert_same_values(dequantize(q, dtype), dequantize_torch(q, dtype), f"dequantize extremes {dtype}")


def test_quantize_is_deterministic():
    x = randn(ROWS, HIDDEN, seed=7)
    first = quantize(x)
    for _ in range(3):
        assert_same_quantization(quantize(x), first, "repeat")


# ======================================================================================================
# The grouped GEMM vs dequantize-then-fp64-matmul, every weight orientation
# ======================================================================================================
def check_gemm(a: MXFP8Tensor, w: MXFP8Tensor, tile_expert, real_rows, what: str) -> None:
    from mok.triton_ref.mxfp8_gemm import mxfp8_grouped_gemm, mxfp8_grouped_gemm_torch
    rows, k = a.shape
    ref = mxfp8_grouped_gemm_torch(a, w, tile_expert, TILE, out_dtype=torch.float64)
    used = torch.isfinite(ref[:, 0])
    outs = {}
    for out_dtype in (torch.float32, torch.bfloat16):
        out = torch.full((rows, w.shape[1]), float("nan"), dtype=out_dtype, device="cuda")   # poison
        outs[out_dtype] = mxfp8_grouped_gemm(a, w, tile_expert, TILE, out_dtype=out_dtype, out=out)
        assert torch.isnan(out[~used]).all(), f"{what}: skipped tiles were written"
        assert torch.isfinite(out[used]).all(), f"{what}: some rows were not written"
    got, want = outs[torch.float32][used].double(), ref[used]
    # |fp32 sum - exact| <= K * 2^-24 * sum|a||w| <= K * 2^-24 * ||a_row|| ||w_col|| (Cauchy-Schwarz).
    a_norm = dequantize(a, torch.float32).double()[used].norm(dim=1)
    w_norm = dequantize(w, torch.float32).double().norm(dim=2)                          # [E, N]
    experts = tile_expert.repeat_interleave(TILE)[used].long()
    bound = k * 2.0 ** -24 * a_norm[:, None] * w_norm[experts] + 1e-30   # padding rows: 0 <= 1e-30
    rel = float((got - want).norm() / want.norm())
    worst = float(((got - want).abs() / bound).max())
    print(f"\n{what}: M={rows} K={k} N={w.shape[1]}: fp32 output relative error {rel:.2e}, "
          f"worst |err| / fp32 bound {worst:.3f}")
    assert worst <= 1.0 and rel < 1e-5, what
    assert_same_values(outs[torch.bfloat16], outs[torch.float32].bfloat16(), f"{what}: bf16 = round(fp32)")
    # Padding rows hold zeros, so their outputs are zeros.
    padding = used & ~real_rows
    assert (outs[torch.float32][padding] == 0).all()


def routed_rows(width: int, real_rows, seed: int) -> MXFP8Tensor:
    x = randn(ROWS, width, seed=seed) * real_rows[:, None]
    return quantize(x)


@pytest.mark.parametrize("orientation", ["gate_up_fwd", "down_fwd", "down_dgrad", "gate_up_dgrad"])
def test_grouped_gemm_matches_dequantized_reference(weights, routing, orientation):
    qw = weights[3]
    tile_expert, real_rows = routing
    w = getattr(qw, orientation)
    check_gemm(routed_rows(w.shape[2], real_rows, seed=8), w, tile_expert, real_rows, orientation)


def test_grouped_gemm_is_deterministic(weights, routing):
    from mok.triton_ref.mxfp8_gemm import mxfp8_grouped_gemm
    qw = weights[3]
    tile_expert, real_rows = routing
    qa = routed_rows(HIDDEN, real_rows, seed=9)
    used = tile_expert.repeat_interleave(TILE) >= 0          # skipped tiles are never written

    def run(**kwargs):
        return mxfp8_grouped_gemm(qa, qw.gate_up_fwd, tile_expert, TILE, out_dtype=torch.float32, **kwargs)[used]

    first = run()
    for _ in range(3):
        assert_same_values(run(), first, "repeat")
    assert_same_values(run(hw_decode=False), first, "software E4M3 decode vs hardware")


# ======================================================================================================
# What MXFP8 costs in accuracy: an expert forward and its dgrads vs bf16 (MoK: rel L1 <= 0.1, max abs <= 1)
# ======================================================================================================
def error_report(name: str, got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    got, ref = got.double(), ref.double()
    rel_l1 = float((got - ref).abs().sum() / ref.abs().sum())
    max_abs = float((got - ref).abs().max())
    print(f"\nMXFP8 vs BF16 {name}: relative L1 {rel_l1:.4f}, max abs {max_abs:.4f} "
          f"(|ref| max {float(ref.abs().max()):.3f})")
    return rel_l1, max_abs


def bf16_grouped(a: torch.Tensor, w: torch.Tensor, tile_expert) -> torch.Tensor:
    """The BF16 reference GEMM: bf16 operands, fp32 accumulation (cuBLAS), per tile's expert, fp32 result."""
    out = torch.zeros(a.shape[0], w.shape[1], device="cuda")
    for t, expert in enumerate(tile_expert.tolist()):
        if expert >= 0:
            rows = slice(t * TILE, (t + 1) * TILE)
            out[rows] = a[rows].float() @ w[expert].float().T   # exact products of bf16 values, fp32 sums
    return out


def test_mxfp8_expert_error_vs_bf16(weights, routing):
    from mok.triton_ref.mxfp8_gemm import mxfp8_grouped_gemm
    w_gate, w_up, w_down, qw = weights
    tile_expert, real_rows = routing
    with ieee_fp32_matmul():  # plain fp32 products in the references, restored afterwards
        x = randn(ROWS, HIDDEN, seed=10) * real_rows[:, None]
        d_out = randn(ROWS, HIDDEN, seed=11, scale=(INTER / HIDDEN) ** 0.5) * real_rows[:, None]   # g ~ N(0, 1)
        d_gate_up = randn(ROWS, 2 * INTER, seed=12, scale=0.1) * real_rows[:, None]
        w_gate_up = torch.cat([w_gate, w_up], dim=1)

        # BF16 reference: bf16 operands, fp32 accumulation, bf16 storage of gate/up and h.
        gate_up = bf16_grouped(x, w_gate_up, tile_expert).bfloat16()
        gate, up = gate_up[:, :INTER].float(), gate_up[:, INTER:].float()
        h = (torch.nn.functional.silu(gate) * up).bfloat16()
        y_ref = bf16_grouped(h, w_down, tile_expert)
        g_ref = bf16_grouped(d_out, w_down.transpose(1, 2).contiguous(), tile_expert)
        dx_ref = bf16_grouped(d_gate_up, w_gate_up.transpose(1, 2).contiguous(), tile_expert)

        # MXFP8: the pipeline's calls (module docstring of mok.mxfp8).
        gate_up_q = mxfp8_grouped_gemm(quantize(x), qw.gate_up_fwd, tile_expert, TILE, out_dtype=torch.bfloat16)
        gate_q, up_q = gate_up_q[:, :INTER].float(), gate_up_q[:, INTER:].float()
        h_q = (torch.nn.functional.silu(gate_q) * up_q).bfloat16()
        y_q = mxfp8_grouped_gemm(quantize(h_q), qw.down_fwd, tile_expert, TILE, out_dtype=torch.float32)
        g_q = mxfp8_grouped_gemm(quantize(d_out), qw.down_dgrad, tile_expert, TILE, out_dtype=torch.float32)
        dx_q = mxfp8_grouped_gemm(quantize(d_gate_up), qw.gate_up_dgrad, tile_expert, TILE, out_dtype=torch.float32)

        used = real_rows
        for name, got, ref in (("expert output y = W_down swiglu(W_gu x)", y_q, y_ref),
                               ("dgrad g = W_down^T dO", g_q, g_ref),
                               ("dgrad dx = W_gu^T [dg|du]", dx_q, dx_ref)):
            rel_l1, max_abs = error_report(f"{name} (H={HIDDEN}, I={INTER})", got[used], ref[used])
            assert rel_l1 <= 0.1 and max_abs <= 1.0, name
            assert rel_l1 > 1e-3, f"{name}: suspiciously exact; is MXFP8 quantization happening?"
