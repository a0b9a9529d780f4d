"""MXFP8: E4M3 elements with one E8M0 (power-of-two) scale per 32 consecutive elements along one dim.

This module is the public MXFP8 API of mok:

* :class:`MXFP8Tensor`: ``data`` (torch.float8_e4m3fn, the source tensor's shape), ``scales`` (uint8 E8M0
  biased exponents, one per 32 elements along ``dim``) and ``dim``.
* :func:`quantize` / :func:`dequantize`: the Triton kernels of :mod:`mok.triton_ref.mxfp8_quant` on CUDA (and
  on CPU under ``TRITON_INTERPRET=1``), the PyTorch reference :func:`quantize_torch` /
  :func:`dequantize_torch` otherwise. Both produce the same bits (tested).
* :class:`MXFP8Weights`: the three expert weights quantized once, in the orientation each GEMM needs;
  :meth:`MXFP8Weights.quantize` goes through a cache (:class:`WeightCache`) that requantizes only after the
  weights change (see "Using it" below).

The format and rounding rules (OCP MX v1.0) are spelled out in :mod:`mok.triton_ref.mxfp8_quant`. In short:
``scale = 2^ceil(log2(amax / 448))`` per block (exact, from the bits of amax; ``amax = 0`` gives the minimum
2^-127, scale byte 0), elements ``x / scale`` clamped to +-448 and rounded to E4M3 nearest-even, scale byte
``= exponent + 127`` (never 255). NaN/inf elements become the E4M3 NaN code and do not affect their block's
scale. Elements within 1/16 of fp32's maximum (|x| > ~3.2e38) may round up to 2^128 and dequantize to inf.

Memory layout: the quantized dim is always the innermost (stride-1) dim of ``data`` and ``scales``. For
``dim=-1`` on a contiguous tensor everything is plainly contiguous; for another dim, ``data`` is a transposed
view of K-major storage, which is what a GEMM reducing along that dim wants (:meth:`MXFP8Tensor.kmajor`).

Numerics contract (what ``precision="mxfp8"`` computes)
-------------------------------------------------------
Every expert GEMM ``out = A @ W[e]^T`` with MXFP8 operands computes exactly
``dequantize(A, bf16) @ dequantize(W[e], bf16)^T`` with fp32 accumulation: dequantization is exact (an E4M3
value times a power of two is a bf16 value; the one exception is a block whose scale is below 2^-124, scale
byte < 3, i.e. amax < ~1e-35, where bf16 subnormals round), so the only differences from the
dequantize-then-matmul reference are fp32 summation order. Hopper has no block-scaled MMA;
:mod:`mok.triton_ref.mxfp8_gemm` dequantizes each 32-wide K chunk on chip and multiplies in bf16 with fp32
accumulation.

Using it: ``mok.moe(..., precision="mxfp8")``
---------------------------------------------
Pass the usual bf16 ``x`` and bf16 weights (``w_gate, w_up`` ``[E, I, H]``, ``w_down`` ``[E, H, I]``) with
``precision="mxfp8"`` (``backend="triton"``, or ``backend="cuda"``: the megakernel forward with the same contract,
see :mod:`mok.cuda.backend`). Gradients flow to x, the router weights and the bf16 weights,
as in BF16 mode. The weights are quantized **once per weight version** by the quantized-weight cache behind
:meth:`MXFP8Weights.quantize`: an entry is keyed by the three tensors' identities (weak references) and is
reused while each tensor's storage, layout and autograd ``_version`` are unchanged, so the first call after
an optimizer step (an in-place update, which bumps ``_version``) requantizes and every other call reuses the
quantized copies (:class:`WeightCache`; :func:`clear_weight_cache` frees them). Calling
``MXFP8Weights.quantize(w_gate, w_up, w_down)`` yourself fills the same cache, e.g. to quantize right after
the optimizer step instead of inside the next forward. Writes that bypass the version counter (through
``w.data``) are not seen: clear the cache after them. :mod:`mok.triton_ref.mxfp8_rows` describes the data
flow (what is quantized where, what travels, which GEMM dequantizes what); in short::

    qw = MXFP8Weights.quantize(w_gate, w_up, w_down)          # cached: once per weight version
    qx = quantize(x, dim=-1)                                  # on each source rank, as packed rows [T, H+H/32]
    # pull dispatch moves packed rows (codes then scales) through the schedule table into the ring
    gate_up, qh = gate/up GEMM + SwiGLU (x, qw.gate_up_fwd)   # bf16 [M, 2I]; h quantized along I in the epilogue
    y = mxfp8_grouped_gemm(qh, qw.down_fwd, ..., push=...)    # bf16 rows pushed into the combine slots
    # backward: dO quantized along H on its source rank and pulled;
    g = dequant(q_dO) @ dequant(qw.down_dgrad)^T  (+ SwiGLU backward, router gradient)     # fp32 [M, I]
    dx = mxfp8_grouped_gemm(quantize([d_gate|d_up]), qw.gate_up_dgrad, ..., push=...)     # along 2I
    # weight gradients: bf16 operands (dequantized x and dO rows, exact), fp32 accumulation

Weight gradients reduce over tokens and do not read the weights, so they run in bf16 on the dequantized
activations. If they are ever quantized it must be along the token axis (``quantize(t, dim=0)``): segments
start at multiples of the tile (a multiple of 32), so token-axis blocks never straddle two experts.
:func:`mok.triton_ref.mxfp8_gemm.mxfp8_grouped_gemm` reads ``tile_expert`` (``-1`` tiles are skipped and
not written); padding rows inside a tile are computed like any row (rows are independent, so whatever they
hold cannot leak into real rows).

Tolerances vs the BF16 reference (MoK's MXFP8 tests, background.md): relative L1 <= 0.1 and max-abs <= 1.0
(max-abs depends on the data's scale; relative L1 does not). Measured on the CPU (x ~ N(0,1), weights ~
N(0, 1/fan-in), x, the weights and h all quantized): relative L1 0.066, max abs 0.20 (|y| max 3.4) on an
expert's output y = W_down swiglu(W_gu x) at H=512, I=256 (tests/test_mxfp8.py prints it). E4M3 keeps 3
mantissa bits (relative rounding error up to 2^-4) and several quantized operands contribute. The whole layer
(``mok.moe(..., precision="mxfp8")``, CPU interpreter, three tiny shapes x three seeds) measured 0.057-0.085
relative error (L2) against the fp64 oracle on the output and on all five gradients, gradient cosine
similarity >= 0.996 (tests/test_triton_mxfp8.py prints one of them); tests/test_mxfp8_gpu.py and
tests/test_triton_mxfp8_gpu.py print the figures at model widths on the H200 (not recorded yet).
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass, field

import torch

MX_BLOCK = 32
"""Elements per E8M0 scale."""

E4M3_MAX = 448.0
E8M0_BIAS = 127
E8M0_MIN_EXPONENT = -127
E8M0_NAN = 255
E4M3_NAN_CODE = 0x7F


# ======================================================================================================
# The quantized tensor
# ======================================================================================================
@dataclass(frozen=True)
class MXFP8Tensor:
    """A tensor quantized to MXFP8 along ``dim``.

    Attributes:
        data: torch.float8_e4m3fn, the source tensor's shape ``[..., K, ...]`` (K at position ``dim``).
        scales: uint8 E8M0 biased exponents, the shape of ``data`` with K replaced by ``K / 32``; element
            ``i`` along ``dim`` has scale ``2^(scales[..., i // 32, ...] - 127)``.
        dim: the quantized dim, non-negative.
    """

    data: torch.Tensor
    scales: torch.Tensor
    dim: int

    def __post_init__(self) -> None:
        if self.data.dtype != torch.float8_e4m3fn:
            raise TypeError(f"MXFP8Tensor.data must be torch.float8_e4m3fn, got {self.data.dtype}")
        if self.scales.dtype != torch.uint8:
            raise TypeError(f"MXFP8Tensor.scales must be uint8 (E8M0 biased exponents), got {self.scales.dtype}")
        ndim = self.data.dim()
        if not -ndim <= self.dim < ndim:
            raise ValueError(f"dim={self.dim} out of range for data of shape {list(self.data.shape)}")
        dim = self.dim % ndim
        object.__setattr__(self, "dim", dim)
        expected = list(self.data.shape)
        if expected[dim] % MX_BLOCK:
            raise ValueError(f"the quantized dim has size {expected[dim]}, not a multiple of {MX_BLOCK}")
        expected[dim] //= MX_BLOCK
        if list(self.scales.shape) != expected:
            raise ValueError(f"MXFP8Tensor.scales must have shape {expected} for data {list(self.data.shape)} "
                             f"quantized along dim {dim}, got {list(self.scales.shape)}")
        if self.scales.device != self.data.device:
            raise ValueError(f"data is on {self.data.device} but scales on {self.scales.device}")

    @property
    def shape(self) -> torch.Size:
        return self.data.shape

    @property
    def device(self) -> torch.device:
        return self.data.device

    @property
    def nbytes(self) -> int:
        """Bytes of data plus scales: ``33/32`` bytes per element (bf16 takes 2)."""
        return self.data.numel() + self.scales.numel()

    def kmajor(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(data, scales)`` with the quantized dim moved last: ``[..., K]`` fp8 and ``[..., K/32]`` uint8.

        Views; contiguous for tensors made by :func:`quantize`.
        """
        return self.data.movedim(self.dim, -1), self.scales.movedim(self.dim, -1)


# ======================================================================================================
# Dispatch
# ======================================================================================================
def _interpreting() -> bool:
    # Not mok.triton_ref._common.INTERPRETING: this module does not import Triton.
    return os.environ.get("TRITON_INTERPRET") == "1"


def _use_triton(device: torch.device, backend: str | None) -> bool:
    if backend not in (None, "triton", "torch"):
        raise ValueError(f"backend must be None, 'triton' or 'torch', got {backend!r}")
    if backend is not None:
        return backend == "triton"
    return device.type == "cuda" or (device.type == "cpu" and _interpreting())


def _normalize_dim(t: torch.Tensor, dim: int) -> int:
    if t.dim() == 0:
        raise ValueError("cannot quantize a 0-d tensor")
    if not -t.dim() <= dim < t.dim():
        raise ValueError(f"dim={dim} out of range for a tensor of shape {list(t.shape)}")
    dim %= t.dim()
    if t.shape[dim] % MX_BLOCK:
        raise ValueError(f"the quantized dim {dim} has size {t.shape[dim]}, which is not a multiple of "
                         f"{MX_BLOCK} (one E8M0 scale per {MX_BLOCK} elements)")
    return dim


def _as_batched_rows(moved: torch.Tensor) -> torch.Tensor:
    """A ``[..., K]`` tensor as the ``[B, R, K]`` view the kernels take (a copy only if the leading dims of a
    >3-d tensor cannot be merged)."""
    if moved.dim() == 1:
        return moved[None, None]
    if moved.dim() == 2:
        return moved[None]
    return moved.reshape(-1, moved.shape[-2], moved.shape[-1])


def quantize(t: torch.Tensor, dim: int = -1, *, backend: str | None = None) -> MXFP8Tensor:
    """Quantize ``t`` to MXFP8 along ``dim`` (see the module docstring for the rules).

    Args:
        t: float32/bfloat16/float16 tensor, ``t.shape[dim] % 32 == 0``; any strides. Not differentiated.
        dim: the dim the blocks of 32 run along (a GEMM's reduction dim K).
        backend: ``None`` (Triton on CUDA and under ``TRITON_INTERPRET=1``, PyTorch otherwise), ``"triton"``
            or ``"torch"``.
    Returns:
        :class:`MXFP8Tensor` with ``data`` of ``t``'s shape and ``scales`` with ``dim`` divided by 32; the
        quantized dim is innermost in memory.
    """
    if not _use_triton(t.device, backend):
        return quantize_torch(t, dim)
    from .triton_ref.mxfp8_quant import quantize_blocks

    dim = _normalize_dim(t, dim)
    moved = t.detach().movedim(dim, -1)
    codes, scales = quantize_blocks(_as_batched_rows(moved))
    scale_shape = moved.shape[:-1] + (moved.shape[-1] // MX_BLOCK,)
    return MXFP8Tensor(codes.reshape(moved.shape).movedim(-1, dim),
                       scales.reshape(scale_shape).movedim(-1, dim), dim)


def dequantize(q: MXFP8Tensor, dtype: torch.dtype = torch.bfloat16, *, backend: str | None = None) -> torch.Tensor:
    """The values of ``q``: ``data * 2^(scale - 127)``, as ``dtype`` (bfloat16 or float32).

    Exact in float32; exact in bfloat16 except in blocks with scale below 2^-124 (amax < ~1e-35), where bf16
    subnormals round.
    Returns a tensor of ``q.shape`` whose quantized dim is innermost in memory (like ``q.data``).
    """
    if not _use_triton(q.device, backend):
        return dequantize_torch(q, dtype)
    from .triton_ref.mxfp8_quant import dequantize_blocks

    data, scales = q.kmajor()
    out = dequantize_blocks(_as_batched_rows(data), _as_batched_rows(scales), dtype)
    return out.reshape(data.shape).movedim(-1, q.dim)


# ======================================================================================================
# PyTorch reference
# ======================================================================================================
def _pow2_float64(exponent: torch.Tensor) -> torch.Tensor:
    """Exact ``2^exponent`` in float64, built from the bits (int exponents in [-1022, 1023])."""
    return ((exponent.to(torch.int64) + 1023) << 52).view(torch.float64)


def _ceil_log2_amax_ratio(amax: torch.Tensor) -> torch.Tensor:
    """``ceil(log2(amax / 448))`` as int32, clamped to E8M0's ``[-127, 127]``; ``amax == 0`` -> -127.

    ``amax / 448`` is computed in float64, where it is exact whenever it is a power of two (and otherwise
    cannot round onto one), so frexp gives the exact ceiling.
    """
    mantissa, exponent = torch.frexp(amax.double() / E4M3_MAX)     # ratio = mantissa * 2^exponent, [0.5, 1)
    ceil_log2 = exponent - (mantissa == 0.5).to(exponent.dtype)    # exact powers of two: 2^(exponent - 1)
    ceil_log2 = torch.where(amax == 0, E8M0_MIN_EXPONENT, ceil_log2)
    return ceil_log2.clamp(E8M0_MIN_EXPONENT, 127).to(torch.int32)


def quantize_torch(t: torch.Tensor, dim: int = -1) -> MXFP8Tensor:
    """PyTorch reference of :func:`quantize` (same arguments and result, bit for bit).

    Uses PyTorch's own float32 -> float8_e4m3fn cast (round-to-nearest-even) for the elements, so it checks the
    Triton kernel's hand-written encoder independently.
    """
    dim = _normalize_dim(t, dim)
    if t.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TypeError(f"t must be float32, bfloat16 or float16, got {t.dtype}")
    moved = t.detach().movedim(dim, -1)
    # contiguous: the quantized dim innermost in memory, as quantize() lays out data and scales
    blocks = moved.float().contiguous().reshape(*moved.shape[:-1], moved.shape[-1] // MX_BLOCK, MX_BLOCK)

    finite = torch.isfinite(blocks)
    amax = torch.where(finite, blocks.abs(), 0.0).amax(dim=-1)                     # [..., K/32]
    exponent = _ceil_log2_amax_ratio(amax)
    scaled = blocks.double() * _pow2_float64(-exponent).unsqueeze(-1)           # exact: power of two
    scaled = scaled.clamp(-E4M3_MAX, E4M3_MAX).float()                          # exact: x * 2^-e fits fp32
    codes = scaled.to(torch.float8_e4m3fn).view(torch.uint8)                    # RNE
    codes = torch.where(finite, codes, torch.full_like(codes, E4M3_NAN_CODE))

    data = codes.view(torch.float8_e4m3fn).reshape(moved.shape).movedim(-1, dim)
    scales = (exponent + E8M0_BIAS).to(torch.uint8).movedim(-1, dim)
    return MXFP8Tensor(data, scales, dim)


def dequantize_torch(q: MXFP8Tensor, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """PyTorch reference of :func:`dequantize`: ``float(data) * 2^(scale - 127)`` in float32, then ``dtype``."""
    if dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"dtype must be float32 or bfloat16, got {dtype}")
    data, scales = q.kmajor()
    scale = _pow2_float64(scales.to(torch.int32) - E8M0_BIAS).float()           # 2^-127 is an fp32 subnormal
    scale = torch.where(scales == E8M0_NAN, float("nan"), scale)
    values = data.float().reshape(*data.shape[:-1], -1, MX_BLOCK) * scale.unsqueeze(-1)
    return values.reshape(data.shape).to(dtype).movedim(-1, q.dim)


# ======================================================================================================
# Expert weights, quantized once
# ======================================================================================================
@dataclass(frozen=True)
class MXFP8Weights:
    """The expert weights in MXFP8, one copy per GEMM orientation.

    Every field is an :class:`MXFP8Tensor` ``[E, N, K]`` quantized along its last dim K, i.e. exactly the
    ``W`` operand of :func:`mok.triton_ref.mxfp8_gemm.mxfp8_grouped_gemm` (``out = A @ W[e]^T``):

    =================  =============  =======================================  ==============================
    field              shape          GEMM                                      A operand (quantized along K)
    =================  =============  =======================================  ==============================
    ``gate_up_fwd``    [E, 2I, H]     forward gate/up: ``[g|u] = x W_gu^T``     x rows ``[M, H]``
    ``down_fwd``       [E, H, I]      forward down: ``y = h W_down^T``          h rows ``[M, I]``
    ``down_dgrad``     [E, I, H]      backward: ``g = dO W_down``               dO rows ``[M, H]``
    ``gate_up_dgrad``  [E, H, 2I]     backward: ``dx = [dg|du] W_gu``           ``[dg|du]`` rows ``[M, 2I]``
    =================  =============  =======================================  ==============================

    ``W_gu`` stacks gate then up rows (``[E, 2I, H]``, as the reference backend does). Since ``I % 32 == 0``,
    blocks never straddle gate and up, so this equals quantizing ``w_gate`` and ``w_up`` separately. The
    ``*_dgrad`` fields hold the same weights quantized along the other axis (stored transposed, K-major);
    they are ``None`` when quantized with ``for_backward=False``. Memory: about one bf16 copy of the weights
    for both orientations together.
    """

    gate_up_fwd: MXFP8Tensor
    down_fwd: MXFP8Tensor
    gate_up_dgrad: MXFP8Tensor | None = None
    down_dgrad: MXFP8Tensor | None = None

    @classmethod
    def quantize(cls, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *,
                 for_backward: bool = True, backend: str | None = None, cache: bool = True) -> "MXFP8Weights":
        """Quantize ``w_gate, w_up`` ``[E, I, H]`` and ``w_down`` ``[E, H, I]`` (bf16 or fp32; I, H multiples
        of 32). ``for_backward`` also makes the dgrad orientations.

        ``cache=True`` (the default) goes through the quantized-weight cache (module docstring): the same three
        tensors, unchanged since (same identity, storage and ``_version``), give back the quantized weights
        made last time without running a kernel. ``mok.moe(..., precision="mxfp8")`` calls this with the bf16
        weights on every call, so calling it yourself first only moves the quantization to a time you choose.
        """
        if cache:
            return _WEIGHT_CACHE.get(w_gate, w_up, w_down, for_backward=for_backward, backend=backend)
        return cls._quantize_now(w_gate, w_up, w_down, for_backward=for_backward, backend=backend)

    @classmethod
    def _quantize_now(cls, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *,
                      for_backward: bool, backend: str | None) -> "MXFP8Weights":
        for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
            if not isinstance(w, torch.Tensor) or w.dim() != 3:
                raise ValueError(f"{name} must be a 3-d tensor")
        experts, inter, hidden = w_gate.shape
        if w_up.shape != w_gate.shape or tuple(w_down.shape) != (experts, hidden, inter):
            raise ValueError(f"expected w_gate, w_up [E, I, H] and w_down [E, H, I]; got {list(w_gate.shape)}, "
                             f"{list(w_up.shape)}, {list(w_down.shape)}")
        if inter % MX_BLOCK or hidden % MX_BLOCK:
            raise ValueError(f"MXFP8 needs I and H to be multiples of {MX_BLOCK}, got I={inter}, H={hidden}")
        gate_up = torch.cat([w_gate.detach(), w_up.detach()], dim=1)                  # [E, 2I, H]
        gate_up_fwd = quantize(gate_up, dim=2, backend=backend)
        down_fwd = quantize(w_down, dim=2, backend=backend)
        if not for_backward:
            return cls(gate_up_fwd, down_fwd)
        gate_up_dgrad = quantize(gate_up.transpose(1, 2), dim=2, backend=backend)     # [E, H, 2I]
        down_dgrad = quantize(w_down.detach().transpose(1, 2), dim=2, backend=backend)  # [E, I, H]
        return cls(gate_up_fwd, down_fwd, gate_up_dgrad, down_dgrad)

    def forward_only(self) -> "MXFP8Weights":
        """These weights without the dgrad orientations (views, no copy)."""
        return MXFP8Weights(self.gate_up_fwd, self.down_fwd)

    def experts(self, start: int, stop: int) -> "MXFP8Weights":
        """Experts ``[start, stop)`` (e.g. one EP rank's local experts): views of every field, no copy."""
        def part(q: MXFP8Tensor | None) -> MXFP8Tensor | None:
            return None if q is None else MXFP8Tensor(q.data[start:stop], q.scales[start:stop], q.dim)
        return MXFP8Weights(part(self.gate_up_fwd), part(self.down_fwd), part(self.gate_up_dgrad),
                            part(self.down_dgrad))

    @property
    def num_experts(self) -> int:
        return self.gate_up_fwd.shape[0]

    @property
    def intermediate(self) -> int:
        return self.gate_up_fwd.shape[1] // 2

    @property
    def hidden(self) -> int:
        return self.gate_up_fwd.shape[2]

    @property
    def shape(self) -> torch.Size:
        """w_gate's logical shape ``[E, I, H]`` (what :func:`mok.checks.check_moe_inputs` reads)."""
        return torch.Size((self.num_experts, self.intermediate, self.hidden))

    @property
    def device(self) -> torch.device:
        return self.gate_up_fwd.device

    @property
    def has_backward(self) -> bool:
        return self.gate_up_dgrad is not None and self.down_dgrad is not None

    def check(self, x: torch.Tensor, *, backward: bool = False) -> None:
        """Raise if these weights do not fit activations ``x`` ``[T, H]`` (hidden size, device, orientations)."""
        if x.shape[-1] != self.hidden:
            raise ValueError(f"x has hidden size {x.shape[-1]} but the MXFP8 weights have H={self.hidden}")
        if x.device != self.device:
            raise ValueError(f"x is on {x.device} but the MXFP8 weights are on {self.device}")
        if backward and not self.has_backward:
            raise ValueError("these MXFP8 weights were quantized with for_backward=False; the backward needs "
                             "the dgrad orientations")

    def dequantized(self, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(w_gate, w_up, w_down)`` as the forward GEMMs see them (for references and tests)."""
        gate_up = dequantize(self.gate_up_fwd, dtype)
        return gate_up[:, :self.intermediate], gate_up[:, self.intermediate:], dequantize(self.down_fwd, dtype)


# ======================================================================================================
# The quantized-weight cache
# ======================================================================================================
@dataclass
class _CacheEntry:
    refs: tuple            # weak references to (w_gate, w_up, w_down)
    stamp: tuple           # what must be unchanged for the entry to be valid
    weights: MXFP8Weights
    dequantized: dict = field(default_factory=dict)  # dtype -> the forward weights as their GEMMs see them


def _stamp(tensors: tuple[torch.Tensor, ...], backend: str | None) -> tuple:
    """What identifies the *values* of the weights without reading them: storage, layout and the autograd
    version counter (bumped by every in-place update: ``optimizer.step()``, ``w.add_()``, ``w.copy_()``)."""
    return (backend,) + tuple((t._version, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype, t.device)
                              for t in tensors)


@dataclass
class WeightCache:
    """Quantized expert weights per ``(w_gate, w_up, w_down)``, valid while none of them changed.

    Keyed by the three tensors' identities (weak references: the cache never keeps weights alive, and an
    entry leaves when its weights are freed); an entry is reused only while each tensor's storage, shape,
    strides, dtype and ``_version`` are what they were when it was quantized, so an optimizer step (an
    in-place update) makes the next call requantize, and nothing else does. ``quantizations`` counts the
    real quantizations (for tests and benchmarks).

    Not seen: writes through ``w.data`` (a separate version counter) or through another tensor sharing the
    storage without sharing the version counter; call :func:`clear_weight_cache` after such writes. Weights
    that are new tensors on every call (e.g. gathered from shards each step) are simply quantized every call.
    """

    entries: dict = field(default_factory=dict)
    quantizations: int = 0

    def get(self, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, for_backward: bool,
            backend: str | None) -> MXFP8Weights:
        weights, _ = self._lookup(w_gate, w_up, w_down, for_backward=for_backward, backend=backend)
        return weights

    def dequantized(self, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, for_backward: bool,
                    backend: str | None = None, dtype: torch.dtype = torch.bfloat16):
        """``(w_gate, w_up, w_down)`` as the forward GEMMs see them (:meth:`MXFP8Weights.dequantized`,
        contiguous), kept with the cached quantization: made once per weight version, and gone with it.
        ``backend="cuda"`` multiplies these (exact in bf16) instead of dequantizing on chip. Memory: one more
        copy of the weights in ``dtype`` while cached."""
        weights, entry = self._lookup(w_gate, w_up, w_down, for_backward=for_backward, backend=backend)
        copies = entry.dequantized.get(dtype) if entry is not None else None
        if copies is None:
            copies = tuple(t.contiguous() for t in weights.dequantized(dtype))
            if entry is not None:
                entry.dequantized[dtype] = copies
        return copies

    def _lookup(self, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, for_backward: bool,
                backend: str | None) -> tuple[MXFP8Weights, _CacheEntry | None]:
        """The quantized weights and their cache entry (None for weights that are never cached)."""
        tensors = (w_gate, w_up, w_down)
        if not all(isinstance(t, torch.Tensor) for t in tensors):
            raise TypeError("MXFP8Weights.quantize takes three tensors (w_gate, w_up, w_down)")
        if any(t.is_inference() for t in tensors):  # no version counter to watch: never cached
            self.quantizations += 1
            return MXFP8Weights._quantize_now(w_gate, w_up, w_down, for_backward=for_backward, backend=backend), None
        key = tuple(id(t) for t in tensors)
        stamp = _stamp(tensors, backend)
        entry = self.entries.get(key)
        if (entry is not None and all(ref() is t for ref, t in zip(entry.refs, tensors)) and entry.stamp == stamp
                and (entry.weights.has_backward or not for_backward)):
            weights = entry.weights if for_backward or not entry.weights.has_backward else entry.weights.forward_only()
            return weights, entry
        weights = MXFP8Weights._quantize_now(w_gate, w_up, w_down, for_backward=for_backward, backend=backend)
        self.quantizations += 1
        entry = _CacheEntry((), stamp, weights)
        entry.refs = tuple(weakref.ref(t, self._evictor(key, entry)) for t in tensors)
        self.entries[key] = entry
        return weights, entry

    def _evictor(self, key: tuple, entry: _CacheEntry):
        def evict(_ref) -> None:
            if self.entries.get(key) is entry:  # not a newer entry under a reused id
                del self.entries[key]
        return evict

    def clear(self) -> None:
        self.entries.clear()


_WEIGHT_CACHE = WeightCache()


def weight_cache() -> WeightCache:
    """The process-wide cache behind :meth:`MXFP8Weights.quantize` (and so ``precision="mxfp8"``)."""
    return _WEIGHT_CACHE


def clear_weight_cache() -> None:
    """Forget every cached quantization (frees their memory; the next call requantizes)."""
    _WEIGHT_CACHE.clear()


__all__ = ["MX_BLOCK", "MXFP8Tensor", "MXFP8Weights", "WeightCache", "clear_weight_cache", "dequantize",
           "dequantize_torch", "quantize", "quantize_torch", "weight_cache"]
