"""MXFP8 quantize/dequantize and the MXFP8 grouped GEMM, on CPU (Triton kernels under TRITON_INTERPRET=1).

Checks: the Triton quantizer equals the PyTorch reference bit for bit (which uses PyTorch's own fp8 cast), the
scale exponent against an exact rational oracle, round-to-nearest-even on hand-computed ties, exact
dequantization of every (code, scale) pair, edge cases (zeros, subnormals, 448, huge, NaN/inf), the
weights' orientations, the GEMM against an fp64 product of the dequantized operands with an fp32 rounding
bound, bitwise determinism, and the end-to-end error of an MXFP8 SwiGLU expert vs bf16.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction

import pytest
import torch

from conftest import TRITON_DEVICE as DEVICE  # the interpreter without a GPU
from conftest import bits
from mok.mxfp8 import (MX_BLOCK, MXFP8Tensor, MXFP8Weights, dequantize, dequantize_torch, quantize,
                       quantize_torch)
from mok.triton_ref.mxfp8_gemm import DEFAULT_CONFIG, GemmConfig, mxfp8_grouped_gemm, mxfp8_grouped_gemm_torch


def codes(q: MXFP8Tensor) -> torch.Tensor:
    return q.data.view(torch.uint8)


def assert_same_quantization(a: MXFP8Tensor, b: MXFP8Tensor, what: str) -> None:
    assert a.dim == b.dim and a.shape == b.shape, what
    diff = codes(a) != codes(b)
    assert not bool(diff.any()), f"{what}: {int(diff.sum())} of {diff.numel()} codes differ"
    assert torch.equal(a.scales, b.scales), f"{what}: {int((a.scales != b.scales).sum())} scales differ"


def assert_same_values(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    """Bitwise equal, except that NaNs only need to sit at the same places (payloads may differ)."""
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    assert torch.equal(nan_a, nan_b), f"{what}: NaN positions differ"
    diff = bits(torch.where(nan_a, 0, a)) != bits(torch.where(nan_b, 0, b))
    assert not bool(diff.any()), f"{what}: {int(diff.sum())} of {a.numel()} values differ bitwise"


def wide_range(*shape, seed=0, dtype=torch.float32):
    """Random values whose 32-element blocks span ~40 binades, plus a within-block spread."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=gen)
    block_scale = torch.exp2(torch.randint(-20, 20, (*shape[:-1], shape[-1] // MX_BLOCK), generator=gen).float())
    x = x * block_scale.repeat_interleave(MX_BLOCK, dim=-1)
    return x.to(dtype).to(DEVICE)


def e4m3_value(code: int) -> float:
    """The value of an E4M3 (fn) code, from the definition."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 15 and mantissa == 7:
        return math.nan
    if exponent == 0:
        return sign * mantissa * 2.0 ** -9
    return sign * (1 + mantissa / 8) * 2.0 ** (exponent - 7)


# ======================================================================================================
# Quantize: Triton kernel == PyTorch reference, bit for bit
# ======================================================================================================
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_quantize_matches_reference_last_dim(dtype):
    if dtype == torch.float16:  # fp16's range is too narrow for wide_range
        x = (torch.randn(7, 160, generator=torch.Generator().manual_seed(1)) * 30).to(dtype).to(DEVICE)
    else:
        x = wide_range(7, 160, seed=1, dtype=dtype)
    assert_same_quantization(quantize(x, backend="triton"), quantize_torch(x), f"{dtype} [7, 160]")


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_quantize_matches_reference_any_dim(dim):
    x = wide_range(32, 64, 96, seed=2)
    q, ref = quantize(x, dim=dim, backend="triton"), quantize_torch(x, dim=dim)
    for made in (q, ref):
        assert made.data.stride(dim) == 1 and made.scales.stride(dim) == 1, "the quantized dim must be innermost"
    assert q.scales.shape[dim] == x.shape[dim] // MX_BLOCK
    assert_same_quantization(q, ref, f"dim {dim}")


def test_quantize_non_contiguous_input():
    x = wide_range(64, 96, seed=3)
    assert_same_quantization(quantize(x.T, dim=1, backend="triton"), quantize(x.T.contiguous(), dim=1,
                                                                              backend="triton"), "x.T")


def test_quantize_1d_and_4d():
    x = wide_range(2, 3, 4, 64, seed=4)
    assert_same_quantization(quantize(x, backend="triton"), quantize_torch(x), "4-d")
    assert_same_quantization(quantize(x[0, 0, 0], backend="triton"), quantize_torch(x[0, 0, 0]), "1-d")


# ======================================================================================================
# The scale: exactly ceil(log2(amax / 448)), from an exact rational oracle
# ======================================================================================================
def exact_scale_exponent(amax: float) -> int:
    if amax == 0:
        return -127
    ratio = Fraction(amax) / 448
    e = math.floor(math.log2(ratio))
    while Fraction(2) ** e < ratio:   # smallest e with amax / 2^e <= 448, fixed up exactly
        e += 1
    while Fraction(2) ** (e - 1) >= ratio:
        e -= 1
    return max(e, -127)


def test_scale_exponent_matches_exact_oracle():
    boundary = [448.0 * 2.0 ** k for k in (-130, -20, -1, 0, 1, 30)]
    near = [math.nextafter(v, math.inf) for v in boundary] + [math.nextafter(v, 0) for v in boundary]
    gen = torch.Generator().manual_seed(5)
    random = (torch.rand(64, generator=gen) * torch.exp2(torch.randint(-140, 120, (64,), generator=gen).float()))
    amaxes = torch.tensor(boundary + near + [0.0, 1e-45, 1e-40, 1.0, 3.0e38], dtype=torch.float32)
    amaxes = torch.cat([amaxes, random.float()])
    x = torch.zeros(amaxes.numel(), MX_BLOCK)
    x[:, 3] = amaxes
    x[:, 7] = -amaxes / 3
    q = quantize(x.to(DEVICE), backend="triton")
    got = (q.scales[:, 0].cpu().to(torch.int32) - 127).tolist()
    expected = [exact_scale_exponent(float(a)) for a in amaxes]
    assert got == expected
    assert int(q.scales.max()) <= 254


# ======================================================================================================
# Rounding: round-to-nearest-even on hand-computed ties, saturation, signs
# ======================================================================================================
def test_round_to_nearest_even_ties():
    # 448 in the block fixes the scale at 2^0, so every value below is encoded as itself.
    values_and_codes = [
        (448.0, 0x7E),              # largest finite E4M3
        (1.0625, 0x38),             # tie 1.0 | 1.125 -> even mantissa 000
        (1.1875, 0x3A),             # tie 1.125 | 1.25 -> 010
        (-1.0625, 0xB8),            # same, negative
        (232.0, 0x76),              # tie 224 | 240 -> 224 (mantissa 110)
        (2.0 ** -10, 0x00),         # tie 0 | 2^-9 -> 0
        (3 * 2.0 ** -10, 0x02),     # tie 2^-9 | 2*2^-9 -> 2 (subnormal, even)
        (5 * 2.0 ** -10, 0x02),     # tie 2*2^-9 | 3*2^-9 -> 2
        (15 * 2.0 ** -10, 0x08),    # tie 7*2^-9 | 2^-6 -> 2^-6 (subnormal rounds up into the normals)
        (2.0 ** -6 * 1.0625, 0x08),  # tie 2^-6 | 1.125*2^-6 -> 2^-6
        (-(2.0 ** -12), 0x80),      # rounds to zero, keeps its sign
        (0.0, 0x00),
        (-0.0, 0x80),
        (447.0, 0x7E),              # nearest is 448
        (431.0, 0x7D),              # nearest is 416 (0x7D), not 448
        (2.0 ** -9, 0x01),          # smallest subnormal
    ]
    x = torch.zeros(1, MX_BLOCK)
    for i, (value, _) in enumerate(values_and_codes):
        x[0, i] = value
    for backend in ("triton", "torch"):
        q = quantize(x.to(DEVICE), backend=backend)
        assert int(q.scales[0, 0]) == 127, backend
        got = codes(q)[0, :len(values_and_codes)].tolist()
        assert got == [c for _, c in values_and_codes], backend


def test_negative_block_mirrors_positive():
    x = wide_range(4, 64, seed=6)
    pos, neg = quantize(x.abs(), backend="triton"), quantize(-x.abs(), backend="triton")
    assert torch.equal(pos.scales, neg.scales)
    assert torch.equal(codes(neg), codes(pos) | 0x80)


def test_zero_blocks():
    x = torch.zeros(2, 64)
    x[1, :MX_BLOCK] = -0.0
    x[1, MX_BLOCK:] = 1.0
    for backend in ("triton", "torch"):
        q = quantize(x.to(DEVICE), backend=backend)
        assert q.scales.tolist() == [[0, 0], [0, 119]], backend  # amax 0 -> minimum exponent -127
        assert codes(q)[0].eq(0x00).all() and codes(q)[1, :MX_BLOCK].eq(0x80).all(), backend
        assert_same_values(dequantize(q, torch.float32, backend=backend).cpu(), x, f"zeros {backend}")


def test_tiny_values():
    gen = torch.Generator().manual_seed(7)
    # fp32 subnormals and tiny normals: the scale clamps at 2^-127 and the elements still quantize.
    x = torch.randn(6, 64, generator=gen) * torch.tensor([1e-44, 1e-41, 1e-38, 1e-36, 1e-33, 1e-30])[:, None]
    q = quantize(x.to(DEVICE), backend="triton")
    assert_same_quantization(q, quantize_torch(x.to(DEVICE)), "tiny")
    assert q.scales[:3].eq(0).all()
    assert_same_values(dequantize(q, torch.float32, backend="triton"), dequantize_torch(q, torch.float32), "tiny")


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # the interpreter computes inf
def test_huge_values_never_overflow_the_scale():
    x = torch.tensor([3.0e38, -2.9e38, 1e38, 6e37] * 8).reshape(1, MX_BLOCK)
    q = quantize(x.to(DEVICE), backend="triton")
    assert_same_quantization(q, quantize_torch(x.to(DEVICE)), "huge")
    assert int(q.scales.max()) == 247                              # 2^120: the largest scale finite inputs need
    back = dequantize(q, torch.float32).cpu()
    assert torch.isfinite(back).all()
    assert ((back - x).abs() <= x.abs() * 2.0 ** -4).all()
    # Documented corner: within 1/16 of fp32's maximum an element may round up to 2^128, which is inf in fp32.
    top = torch.full((1, MX_BLOCK), -3.3e38)
    q = quantize(top.to(DEVICE), backend="triton")
    assert_same_quantization(q, quantize_torch(top.to(DEVICE)), "fp32 max")
    assert int(q.scales.max()) == 247
    assert torch.equal(dequantize(q, torch.float32).cpu(), torch.full_like(top, -math.inf))


def test_non_finite_inputs_become_nan_elements():
    x = wide_range(3, 64, seed=8)
    x[0, 5] = float("nan")
    x[1, 40] = float("inf")
    x[2, 0] = -float("inf")
    x[2, 32:] = float("nan")                          # a block with nothing finite
    clean = torch.where(torch.isfinite(x), x, 0.0)
    for backend in ("triton", "torch"):
        q = quantize(x, backend=backend)
        assert int(q.scales.max()) < 255, backend
        assert torch.equal(q.scales, quantize(clean, backend=backend).scales), backend  # scales ignore NaN/inf
        bad = ~torch.isfinite(x)
        assert codes(q)[bad].eq(0x7F).all(), backend
        assert torch.equal(codes(q)[~bad], codes(quantize(clean, backend=backend))[~bad]), backend
        back = dequantize(q, torch.float32, backend=backend)
        assert torch.equal(torch.isnan(back), bad), backend
    assert_same_quantization(quantize(x, backend="triton"), quantize_torch(x), "non-finite")


# ======================================================================================================
# Round trip and exact dequantization
# ======================================================================================================
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_round_trip_error_bound(dtype):
    x = wide_range(16, 128, seed=9, dtype=dtype)
    q = quantize(x, backend="triton")
    back = dequantize(q, torch.float32).double()
    ref = x.double()
    scale = torch.exp2(q.scales.double() - 127).repeat_interleave(MX_BLOCK, dim=-1)
    # In the scaled domain v = x / scale: normal E4M3 numbers are within 2^-4 relative, subnormals within 2^-10.
    bound = torch.maximum(ref.abs() * 2.0 ** -4, scale * 2.0 ** -10)
    assert ((back - ref).abs() <= bound).all()
    # Every block's largest element lands in E4M3's top binade (the scale is as small as possible).
    amax_scaled = (back.abs() / scale).reshape(16, -1, MX_BLOCK).amax(-1)
    assert ((amax_scaled >= 224) & (amax_scaled <= 448)).all()  # (224, 448] before rounding


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
def test_dequantize_every_code_exactly():
    all_codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    scale_bytes = torch.tensor([0, 1, 2, 3, 4, 100, 127, 128, 200, 247, 254], dtype=torch.uint8)
    data = all_codes.repeat(scale_bytes.numel(), 1)                                  # [S, 256]
    scales = scale_bytes[:, None].repeat(1, 256 // MX_BLOCK)
    q = MXFP8Tensor(data.view(torch.float8_e4m3fn).to(DEVICE), scales.to(DEVICE), 1)
    exact = torch.tensor([[e4m3_value(c) * 2.0 ** (s - 127) for c in range(256)] for s in scale_bytes.tolist()],
                         dtype=torch.float64)
    # Every value is an fp32 number (>= 2^-136, 4 significant bits) unless it exceeds fp32's range: then inf.
    expected = exact.float()
    assert torch.equal(expected.double()[expected.isfinite()], exact[expected.isfinite()])
    bf16_exact_rows = scale_bytes >= 3                                                 # scales >= 2^-124
    for backend in ("triton", "torch"):
        f32 = dequantize(q, torch.float32, backend=backend).cpu()
        assert_same_values(f32, expected, f"{backend}: fp32 dequantization")
        bf16 = dequantize(q, torch.bfloat16, backend=backend).cpu()
        assert_same_values(bf16[bf16_exact_rows].float(), expected[bf16_exact_rows], f"{backend}: bf16 exactness")
        assert_same_values(bf16, dequantize_torch(q, torch.bfloat16).cpu(), f"{backend}: bf16 vs torch")
    # Below 2^-124 bf16 subnormals round: the documented exception.
    assert not torch.equal(bf16[~bf16_exact_rows].float(), expected[~bf16_exact_rows])


@pytest.mark.parametrize("dim", [0, 1])
def test_dequantize_matches_reference(dim):
    q = quantize_torch(wide_range(64, 96, seed=10), dim=dim)
    for dtype in (torch.float32, torch.bfloat16):
        assert_same_values(dequantize(q, dtype, backend="triton"), dequantize_torch(q, dtype), f"dim {dim} {dtype}")


def test_nan_scale_byte_dequantizes_to_nan():
    data = torch.full((1, MX_BLOCK), 0x38, dtype=torch.uint8).view(torch.float8_e4m3fn)   # 1.0
    q = MXFP8Tensor(data.to(DEVICE), torch.full((1, 1), 255, dtype=torch.uint8, device=DEVICE), 1)
    for backend in ("triton", "torch"):
        assert torch.isnan(dequantize(q, torch.float32, backend=backend)).all(), backend


def test_quantize_is_deterministic():
    x = wide_range(32, 96, seed=11)
    first = quantize(x, backend="triton")
    for _ in range(2):
        assert_same_quantization(quantize(x, backend="triton"), first, "repeat")


# ======================================================================================================
# Argument checks
# ======================================================================================================
def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize(torch.randn(4, 48, device=DEVICE))
    with pytest.raises(ValueError, match="out of range"):
        quantize(torch.randn(4, 64, device=DEVICE), dim=2)
    with pytest.raises(TypeError):
        quantize_torch(torch.ones(4, 64, dtype=torch.int32))
    q = quantize_torch(torch.randn(4, 64))
    with pytest.raises(ValueError, match="scales must have shape"):
        MXFP8Tensor(q.data, q.scales[:, :1], 1)
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        MXFP8Tensor(q.data.view(torch.uint8), q.scales, 1)


# ======================================================================================================
# Weights
# ======================================================================================================
def test_weights_orientations():
    gen = torch.Generator().manual_seed(12)
    experts, inter, hidden = 3, 64, 96
    w_gate, w_up = (torch.randn(experts, inter, hidden, generator=gen).to(DEVICE) for _ in range(2))
    w_down = torch.randn(experts, hidden, inter, generator=gen).to(DEVICE)
    qw = MXFP8Weights.quantize(w_gate, w_up, w_down)
    assert qw.shape == (experts, inter, hidden) and qw.has_backward
    assert qw.gate_up_fwd.shape == (experts, 2 * inter, hidden) and qw.down_fwd.shape == (experts, hidden, inter)
    assert qw.down_dgrad.shape == (experts, inter, hidden) and qw.gate_up_dgrad.shape == (experts, hidden, 2 * inter)
    for field in (qw.gate_up_fwd, qw.down_fwd, qw.gate_up_dgrad, qw.down_dgrad):
        assert field.dim == 2 and field.data.is_contiguous() and field.scales.is_contiguous()

    # Stacking gate and up does not change either one's blocks (I % 32 == 0).
    gate, up = quantize_torch(w_gate, 2), quantize_torch(w_up, 2)
    assert torch.equal(codes(qw.gate_up_fwd), torch.cat([codes(gate), codes(up)], dim=1))
    assert torch.equal(qw.gate_up_fwd.scales, torch.cat([gate.scales, up.scales], dim=1))
    # The dgrad copies are the weights quantized along their other axis, stored transposed.
    down_along_h = quantize_torch(w_down, dim=1)
    assert torch.equal(codes(qw.down_dgrad), codes(down_along_h).transpose(1, 2))
    assert torch.equal(qw.down_dgrad.scales, down_along_h.scales.transpose(1, 2))
    gate_along_i = quantize_torch(w_gate, dim=1)
    assert torch.equal(codes(qw.gate_up_dgrad)[:, :, :inter], codes(gate_along_i).transpose(1, 2))

    g, u, d = qw.dequantized(torch.float32)
    for approx, exact in ((g, w_gate), (u, w_up), (d, w_down)):
        assert (approx - exact).norm() / exact.norm() < 0.05
    qx = torch.randn(5, hidden, device=DEVICE)
    qw.check(qx, backward=True)
    with pytest.raises(ValueError, match="for_backward=False"):
        MXFP8Weights.quantize(w_gate, w_up, w_down, for_backward=False).check(qx, backward=True)
    with pytest.raises(ValueError, match="hidden size"):
        qw.check(torch.randn(5, hidden + 32, device=DEVICE))


# ======================================================================================================
# The grouped GEMM
# ======================================================================================================
def gemm_problem(rows, k, n, experts, tile_rows, tile_expert, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(rows, k, generator=gen) * torch.exp2(torch.randint(-3, 4, (rows, 1), generator=gen).float())
    w = torch.randn(experts, n, k, generator=gen) * k ** -0.5
    te = torch.tensor(tile_expert, dtype=torch.int32)
    assert te.numel() == rows // tile_rows
    return quantize(a.to(DEVICE)), quantize(w.to(DEVICE), dim=2), te.to(DEVICE)


def fp32_accumulation_bound(qa: MXFP8Tensor, qw: MXFP8Tensor, tile_expert, tile_rows):
    """|fp32 sum - exact sum| <= gamma_K * sum |a||w| (K products, fp32 unit roundoff 2^-24), per element."""
    abs_a = MXFP8Tensor(codes(qa).bitwise_and(0x7F).view(torch.float8_e4m3fn), qa.scales, qa.dim)
    abs_w = MXFP8Tensor(codes(qw).bitwise_and(0x7F).view(torch.float8_e4m3fn), qw.scales, qw.dim)
    magnitude = mxfp8_grouped_gemm_torch(abs_a, abs_w, tile_expert, tile_rows, out_dtype=torch.float64)
    k = qa.shape[1]
    return magnitude * (k * 2.0 ** -24) + 1e-30


@pytest.mark.parametrize("rows,k,n,tile_rows,block_m,tile_expert", [
    (64, 96, 48, 16, None, [0, 2, -1, 1]),        # K tail (96 = 64 + 32), N tail, a skipped tile
    (64, 64, 40, 32, 16, [1, 1]),                 # two programs per tile, one expert
    (96, 128, 64, 32, 32, [2, 0, -1]),
])
def test_grouped_gemm_matches_dequantized_reference(rows, k, n, tile_rows, block_m, tile_expert):
    config = None if block_m is None else dataclasses.replace(DEFAULT_CONFIG, block_m=block_m)
    qa, qw, te = gemm_problem(rows, k, n, 3, tile_rows, tile_expert, seed=13)
    ref = mxfp8_grouped_gemm_torch(qa, qw, te, tile_rows, out_dtype=torch.float64)
    bound = fp32_accumulation_bound(qa, qw, te, tile_rows)
    skipped = torch.tensor(tile_expert).repeat_interleave(tile_rows).to(DEVICE) < 0
    outs = {}
    for out_dtype in (torch.float32, torch.bfloat16):
        out = torch.full((rows, n), float("nan"), dtype=out_dtype, device=DEVICE)   # poison
        outs[out_dtype] = mxfp8_grouped_gemm(qa, qw, te, tile_rows, out_dtype=out_dtype, out=out, config=config)
        assert torch.isnan(out[skipped]).all(), "skipped tiles must not be written"
        assert torch.isfinite(out[~skipped]).all(), "some rows were not written"
    got, want = outs[torch.float32][~skipped].double(), ref[~skipped]
    assert ((got - want).abs() <= bound[~skipped]).all(), "beyond the fp32 accumulation bound"
    assert (got - want).norm() / want.norm() < 1e-6
    # bf16 output: the fp32 accumulator rounded once, to nearest even.
    assert_same_values(outs[torch.bfloat16], outs[torch.float32].bfloat16(), "bf16 = round(fp32 accumulator)")


@pytest.mark.parametrize("block_k,block_n", [(32, 64), (128, 32)])
def test_grouped_gemm_other_configs_agree(block_k, block_n):
    qa, qw, te = gemm_problem(32, 160, 48, 2, 16, [1, 0], seed=18)
    got = mxfp8_grouped_gemm(qa, qw, te, 16, out_dtype=torch.float32,
                             config=GemmConfig(block_m=16, block_n=block_n, block_k=block_k, num_warps=4))
    want = mxfp8_grouped_gemm_torch(qa, qw, te, 16, out_dtype=torch.float64)
    assert ((got.double() - want).abs() <= fp32_accumulation_bound(qa, qw, te, 16)).all()


def test_grouped_gemm_both_decoders_agree_and_window():
    qa, qw, te = gemm_problem(64, 96, 48, 3, 16, [0, 2, 1, 1], seed=14)
    sw = mxfp8_grouped_gemm(qa, qw, te, 16, out_dtype=torch.float32, hw_decode=False)
    hw = mxfp8_grouped_gemm(qa, qw, te, 16, out_dtype=torch.float32, hw_decode=True)
    assert_same_values(sw, hw, "software vs hardware E4M3 decode")
    # A window of the table: the first 32 rows with a longer tile_expert.
    window = MXFP8Tensor(qa.data[:32], qa.scales[:32], 1)
    part = mxfp8_grouped_gemm(window, qw, te, 16, out_dtype=torch.float32)
    assert_same_values(part, sw[:32], "window")


def test_grouped_gemm_is_deterministic():
    qa, qw, te = gemm_problem(64, 128, 64, 2, 32, [1, 0], seed=15)
    first = mxfp8_grouped_gemm(qa, qw, te, 32, out_dtype=torch.float32)
    for _ in range(2):
        assert_same_values(mxfp8_grouped_gemm(qa, qw, te, 32, out_dtype=torch.float32), first, "repeat")


def test_grouped_gemm_rejects_bad_arguments():
    qa, qw, te = gemm_problem(64, 96, 48, 3, 16, [0, 2, -1, 1], seed=16)
    with pytest.raises(ValueError, match="tile_expert"):
        mxfp8_grouped_gemm(qa, qw, te[:2], 16)
    with pytest.raises(ValueError, match="block_m"):
        mxfp8_grouped_gemm(qa, qw, te, 16, config=GemmConfig(block_m=32))
    with pytest.raises(ValueError, match="block_k"):
        mxfp8_grouped_gemm(qa, qw, te, 16, config=GemmConfig(block_m=16, block_k=48))
    with pytest.raises(ValueError, match="quantized along K"):
        mxfp8_grouped_gemm(quantize_torch(torch.randn(64, 96), dim=0), qw, te, 16)


# ======================================================================================================
# End to end: an MXFP8 SwiGLU expert vs bf16 (MoK's tolerances: relative L1 <= 0.1, max abs <= 1.0)
# ======================================================================================================
def test_mxfp8_expert_error_vs_bf16():
    gen = torch.Generator().manual_seed(17)
    tokens, hidden, inter = 64, 512, 256
    x = torch.randn(tokens, hidden, generator=gen).bfloat16()
    w_gate = (torch.randn(1, inter, hidden, generator=gen) * hidden ** -0.5).bfloat16()
    w_up = (torch.randn(1, inter, hidden, generator=gen) * hidden ** -0.5).bfloat16()
    w_down = (torch.randn(1, hidden, inter, generator=gen) * inter ** -0.5).bfloat16()

    def expert(x, wg, wu, wd, quantized):
        if quantized:
            x = dequantize_torch(quantize_torch(x))
        gate = (x.float() @ wg[0].float().T).bfloat16()
        up = (x.float() @ wu[0].float().T).bfloat16()
        h = (torch.nn.functional.silu(gate.float()) * up.float()).bfloat16()
        if quantized:
            h = dequantize_torch(quantize_torch(h))
        return (h.float() @ wd[0].float().T).bfloat16()

    qw = MXFP8Weights.quantize(w_gate, w_up, w_down, backend="torch")
    g, u, d = (t.cpu() for t in qw.dequantized(torch.bfloat16))
    ref = expert(x, w_gate, w_up, w_down, quantized=False).double()
    got = expert(x, g, u, d, quantized=True).double()
    rel_l1 = float((got - ref).abs().sum() / ref.abs().sum())
    max_abs = float((got - ref).abs().max())
    print(f"MXFP8 vs BF16 SwiGLU expert (T={tokens} H={hidden} I={inter}): rel L1 {rel_l1:.4f}, "
          f"max abs {max_abs:.4f}, |ref| max {float(ref.abs().max()):.3f}")
    assert rel_l1 <= 0.1 and max_abs <= 1.0
    assert rel_l1 > 1e-3, "MXFP8 should differ from bf16 (is quantization happening?)"
