"""The TMA operand loads of swiglu.py's bf16 kernels (``TileConfig.tma``, opt-in): the gate/up GEMM and the down
dgrad with the SwiGLU backward give the pointer loads' bits, at the edges where the descriptors' bounds replace the
masks (an empty expert, unused tiles, a window ending before its buffer, I and H not whole blocks), and a wrong
descriptor shows. Runs under the interpreter (CPU) or on the GPU; the sm_90 compile: test_swiglu_tma_compile.py."""

from __future__ import annotations

import pytest
import torch

from conftest import INTERPRET
from conftest import TRITON_DEVICE as DEVICE
from conftest import assert_bitwise_equal

from mok.triton_ref import swiglu
from mok.triton_ref._common import override_configs

TILE = 16
H, I, E = 48, 40, 3                # I = 40 and H = 48: neither a power of two, so edge blocks are partial
TILE_EXPERT = [2, 0, 0, -1, 1, 1]  # expert 1 owns no tile of the window; tile 3 unused; tiles 4-5 past it
N_ROWS = 4 * TILE                  # the window: the buffers hold 6 tiles of rows
# (block_n, block_k): the interpreter's defaults (one 64-wide block each: I and H end inside it) and smaller
# blocks (two column blocks and two K steps, the second of each partial).
BLOCKS = [{}, {"block_n": 32, "block_k": 32}]


def window(dtype, seed: int, width: int = H, pad: int = 0):
    """Rows as a ring window holds them: random real rows, zero padding rows in the unused tile, NaN past the
    window and in ``pad`` columns to the right of ``width`` (a kernel that read them would produce NaN)."""
    gen = torch.Generator().manual_seed(seed)
    rows = torch.randn(len(TILE_EXPERT) * TILE, width + pad, generator=gen).to(DEVICE, dtype)
    rows[3 * TILE:] = 0
    rows[N_ROWS:] = float("nan")
    rows[:, width:] = float("nan")
    return rows[:, :width]


def weights(dtype, seed: int, *shape):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(E, *shape, generator=gen).to(DEVICE, dtype)


def poisoned(*shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def tile_expert():
    return torch.tensor(TILE_EXPERT, dtype=torch.int32, device=DEVICE)


def gate_up(x, w_gate, w_up, n_rows: int = N_ROWS):
    out = poisoned(x.shape[0], 2 * I, dtype=x.dtype)
    h = poisoned(x.shape[0], I, dtype=x.dtype)
    swiglu.gate_up_swiglu(x, w_gate, w_up, tile_expert(), TILE, gate_up_out=out, h_out=h, n_rows=n_rows)
    return out, h


def down_dgrad(d_out, w_down, weight, stored):
    dtype = d_out.dtype
    partials = swiglu.router_grad_partials(I, H, dtype, TILE)  # inside the caller's override: its block_n
    d_gate_up = poisoned(d_out.shape[0], 2 * I, dtype=dtype)
    hw = poisoned(d_out.shape[0], I, dtype=dtype)
    dw_partial = poisoned(d_out.shape[0], partials, dtype=torch.float32)
    swiglu.down_dgrad_swiglu_backward(d_out, w_down, weight, stored, tile_expert(), TILE, d_gate_up_out=d_gate_up,
                                      hw_out=hw, dw_partial_out=dw_partial, n_rows=N_ROWS)
    return d_gate_up, hw, dw_partial


def problems(dtype, pad: int = 0):
    """``(name, run)`` of both kernels on fresh random operands; ``run()`` returns their outputs."""
    x = window(dtype, 1, pad=pad)
    w_gate, w_up = weights(dtype, 2, I, H), weights(dtype, 3, I, H)   # [E, I, H]
    d_out = window(dtype, 4, pad=pad)
    w_down = weights(dtype, 5, H, I)                                  # [E, H, I]
    weight = torch.rand(len(TILE_EXPERT) * TILE, generator=torch.Generator().manual_seed(6)).to(DEVICE)
    stored = window(dtype, 7, width=2 * I)
    return [("gate_up_swiglu", lambda: gate_up(x, w_gate, w_up)),
            ("down_dgrad_swiglu", lambda: down_dgrad(d_out, w_down, weight, stored))]


def outputs(kernel: str, run, blocks: dict, *, tma: bool):
    with override_configs({kernel: {**blocks, "tma": tma}}):
        return run()


@pytest.fixture
def tma_launches(monkeypatch):
    """How many launches got TMA descriptors (swiglu._tma_descriptors answered with descriptors, not None)."""
    count = []
    real = swiglu._tma_descriptors

    def counted(*args, **kwargs):
        descriptors = real(*args, **kwargs)
        count.append(descriptors is not None)
        return descriptors

    monkeypatch.setattr(swiglu, "_tma_descriptors", counted)
    return count


def assert_same_outputs(got, want, what: str, *, exact: bool = True) -> None:
    """Bit for bit, or (``exact=False``) the same NaN pattern and values within 4 fp32 ulps of the largest."""
    for t, (g, w) in enumerate(zip(got, want)):
        if exact:
            assert_bitwise_equal(g, w, f"{what}, output {t}")
            continue
        assert torch.equal(torch.isnan(g), torch.isnan(w)), f"{what}, output {t}: NaN patterns differ"
        finite = ~torch.isnan(w)
        bound = 4 * torch.finfo(torch.float32).eps * float(w[finite].abs().max())
        diff = float((g[finite] - w[finite]).abs().max())
        assert diff <= bound, f"{what}, output {t}: {diff:.3e} apart (bound {bound:.3e})"


# Under the interpreter an fp32 tl.dot is numpy's matmul, whose summation order follows the operands' memory layout
# (BLAS picks its kernel by strides and alignment): the TMA and pointer loads hand it differently laid-out blocks, and
# on some CPUs the gate/up GEMM's sums then differ in the last bit (seen 2026-12-01: 1 ulp in 3,098 of 3,840). bf16
# operands are upcast to fp32 copies in both paths first, and compiled kernels (GPU) are bitwise in every dtype.
def loads_compare_exactly(dtype) -> bool:
    return not (INTERPRET and dtype == torch.float32)


def assert_window_written(outs, what: str) -> None:
    """Every output row of a used tile written (finite, not all zero); the unused tile and the rows past the
    window left as poisoned."""
    for t, out in enumerate(outs):
        used = out[:3 * TILE]
        assert bool(torch.isfinite(used).all()) and bool((used != 0).any()), f"{what}, output {t}: window rows"
        assert bool(torch.isnan(out[3 * TILE:]).all()), f"{what}, output {t}: unused and past-window rows"


@pytest.mark.parametrize("blocks", BLOCKS, ids=["one-block", "two-blocks"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_tma_loads_give_the_pointer_loads_bits(dtype, blocks, tma_launches):
    for kernel, run in problems(dtype, pad=8):  # x and dO: column slices of wider rows (a row stride past H)
        want = outputs(kernel, run, blocks, tma=False)
        got = outputs(kernel, run, blocks, tma=True)
        assert tma_launches == [False, True], f"{kernel}: TMA was not used"
        assert_window_written(want, kernel)
        assert_same_outputs(got, want, f"{kernel}, TMA vs pointer loads, {blocks}",
                            exact=loads_compare_exactly(dtype))
        tma_launches.clear()


def test_operands_tma_cannot_address_fall_back_to_pointer_loads(tma_launches):
    for kernel, run in problems(torch.bfloat16, pad=1):  # a row of H + 1 bf16: not a multiple of 16 bytes
        want = outputs(kernel, run, {}, tma=False)
        got = outputs(kernel, run, {}, tma=True)
        assert tma_launches == [False, False], kernel
        assert_same_outputs(got, want, f"{kernel}, fallback")
        tma_launches.clear()


def test_an_empty_window_launches_without_descriptors(tma_launches):
    """No rows, no descriptor (TMA cannot describe an empty tensor) and nothing written."""
    w = weights(torch.bfloat16, 2, I, H)
    with override_configs({"gate_up_swiglu": {"tma": True}}):
        out, h = gate_up(window(torch.bfloat16, 1), w, w, n_rows=0)
    assert tma_launches == [False]
    assert bool(torch.isnan(out).all()) and bool(torch.isnan(h).all())


def _short_window(specs):  # A's descriptor half the window: its last used tile reads zeros
    (a, (rows, k), block), *w_specs = specs
    return [(a, (rows // 2, k), block), *w_specs]


def _wide_rows(specs):  # A's descriptor reaching past H into the NaN columns of the wider rows
    (a, (rows, _), block), *w_specs = specs
    return [(a, (rows, a.stride(0)), block), *w_specs]


def _first_expert_only(specs):  # W's descriptors one expert deep: the other experts read zeros
    a_spec, *w_specs = specs
    return [a_spec, *((w, (1, *shape[1:]), block) for w, shape, block in w_specs)]


@pytest.mark.parametrize("mutant", [_short_window, _wide_rows, _first_expert_only])
def test_a_wrong_descriptor_changes_the_bits(mutant, monkeypatch):
    """The comparison above has teeth: descriptors that read other elements than the masks allow give other
    outputs (each kernel, each mutant)."""
    real = swiglu._descriptors
    monkeypatch.setattr(swiglu, "_descriptors", lambda *specs: real(*mutant(list(specs))))
    for kernel, run in problems(torch.bfloat16, pad=8):
        want = outputs(kernel, run, {}, tma=False)
        got = outputs(kernel, run, {}, tma=True)
        with pytest.raises(AssertionError, match="differ bitwise"):
            assert_same_outputs(got, want, f"{kernel}, {mutant.__name__}")
