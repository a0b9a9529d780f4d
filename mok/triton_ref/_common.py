"""What every Triton reference kernel shares: the interpreter switch, the MMA helper, program ordering, the
fixed tile configurations and the (optional) poisoning of fresh buffers.

Nothing here is tuned at run time: a kernel's tile shape depends only on the kernel, the operand dtype, the
problem's sizes and whether we are interpreting, never on timing, so two runs always execute the same
floating-point operations in the same order. Experiments (``experiments/tune_triton.py``) try other shapes
through an explicit override (:func:`override_configs`, or ``MOK_TRITON_CONFIGS`` in the environment).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from dataclasses import dataclass
from typing import Iterator, Mapping

import torch
import triton
import triton.language as tl

# TRITON_INTERPRET=1 runs kernels on CPU tensors in NumPy. triton.jit reads it when a kernel is decorated, so
# it must be set before this package is imported.
INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"

# The same switch inside kernels (device helpers below work around the interpreter's defects with it).
_INTERPRETING = tl.constexpr(INTERPRETING)

TL_DTYPES = {torch.bfloat16: tl.bfloat16, torch.float32: tl.float32, torch.float16: tl.float16}


def tl_dtype(dtype: torch.dtype):
    """The Triton element type of a torch dtype (bf16, fp16, fp32)."""
    if dtype not in TL_DTYPES:
        raise TypeError(f"the Triton kernels handle {sorted(map(str, TL_DTYPES))}, got {dtype}")
    return TL_DTYPES[dtype]


def check_device(*tensors: torch.Tensor) -> None:
    """Triton runs on CUDA tensors, or on CPU tensors under TRITON_INTERPRET=1."""
    for t in tensors:
        if t.is_cuda or (INTERPRETING and t.device.type == "cpu"):  # (is_cuda first: a fraction of device.type's cost)
            continue
        raise RuntimeError(f"the Triton kernels need CUDA tensors (or CPU tensors with TRITON_INTERPRET=1 set "
                           f"before importing mok.triton_ref); got a tensor on {t.device}")


# --------------------------------------------------------------------------------------------------------
# Device helpers
# --------------------------------------------------------------------------------------------------------
@triton.jit
def mma(a, b, acc):
    """``acc + a @ b`` with fp32 accumulation, one MMA chain step.

    fp32 operands use IEEE products (no TF32), so fp32 mode matches an fp32 reference to rounding; bf16
    operands use the tensor cores' bf16 MMA.

    NOTE: the interpreter's tl.dot on bfloat16 operands multiplies the raw 16-bit patterns (garbage); fp32
    operands are right, and a bf16 value converts to fp32 exactly, so there the operands are upcast first.
    """
    if _INTERPRETING:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if a.dtype == tl.float32:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def fp32_to_bf16_rne(x):
    """fp32 ``x`` -> bf16, round to nearest, ties to even, with integer operations (subnormals included): add
    half a bf16 ulp plus the tie-to-even bit to the bit pattern and keep its high 16 bits."""
    bits = x.to(tl.int32, bitcast=True)
    rounded = bits + 0x7FFF + ((bits >> 16) & 1)
    return (rounded >> 16).to(tl.int16).to(tl.bfloat16, bitcast=True)


@triton.jit
def round_to(x, DTYPE: tl.constexpr):
    """``x`` rounded to ``DTYPE`` to nearest, ties to even (what ``.to`` does on the GPU).

    NOTE: the interpreter's fp32 -> bf16 conversion truncates and mangles bf16 subnormals (triton 3.9, even
    with ``fp_downcast_rounding="rtne"``); there the rounding is done by :func:`fp32_to_bf16_rne`.
    """
    if _INTERPRETING:
        if DTYPE == tl.bfloat16:
            x = fp32_to_bf16_rne(x.to(tl.float32))
    return x.to(DTYPE)


@triton.jit
def peer_base(ptr_table, rank, mask, DTYPE: tl.constexpr, ALIGNED: tl.constexpr):
    """Per element of ``rank``: the base pointer (element type ``DTYPE``) of that rank's buffer, read from a
    :class:`mok.comm.PeerBuffer`'s ``ptr_table``; masked-off lanes get a null pointer (never dereferenced).

    NOTE: an address loaded from memory carries no alignment facts, so Triton would move peer rows one
    element at a time. ``ALIGNED`` (every rank's base is 16-byte aligned; :func:`peer_aligned`) lets it use
    16-byte vector loads and stores along a row whose stride is a multiple of 16 bytes.
    """
    base = tl.load(ptr_table + rank, mask=mask, other=0).to(tl.pointer_type(DTYPE))
    if ALIGNED:
        base = tl.multiple_of(base, 16)  # on the pointer: an integer hint does not survive the cast
    return base


def peer_aligned(buffer) -> bool:
    """Whether every rank's base address of a :class:`mok.comm.PeerBuffer` is 16-byte aligned."""
    return all(view.data_ptr() % 16 == 0 for view in buffer.views)


@triton.jit
def column_halves(x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The left and right column halves (``[BLOCK_M, BLOCK_N // 2]`` each) of a register tile.

    NOTE: an epilogue that loads or stores memory per element straight from the MMA accumulator layout holds
    a 64-bit address for every pair of elements a thread owns; on Hopper a 128 x 128 (or wider) tile whose
    epilogue touches several tensors (or pushes to per-row peer addresses) then runs out of registers and
    spills. Working through the tile one column half at a time halves that footprint (checked with ptxas:
    no local-memory traffic at the configurations in this package).
    """
    return tl.split(tl.permute(tl.reshape(x, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))


@triton.jit
def grouped_program_order(pid, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Map a linear program id to (pid_m, pid_n), GROUP_M row tiles at a time.

    The GROUP_M row tiles of a group sweep all column blocks together: consecutive row tiles usually belong
    to the same expert, so the weight column blocks they read stay in L2 while the group passes over them,
    and each row tile's A block is reused across the group's column sweep.
    """
    programs_per_group = GROUP_M * num_pid_n
    group = pid // programs_per_group
    first_m = group * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % programs_per_group) % group_rows
    pid_n = (pid % programs_per_group) // group_rows
    return pid_m, pid_n


# --------------------------------------------------------------------------------------------------------
# TMA (Hopper's tensor memory accelerator) operand loads
# --------------------------------------------------------------------------------------------------------
try:  # host-side tensor descriptors (Triton >= 3.3; the interpreter runs them too)
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton: pointer loads only
    TensorDescriptor = None


def tma_capable(*tensors: torch.Tensor) -> bool:
    """Whether TMA can address every tensor: Hopper or newer (or the interpreter), 16-byte aligned base and
    leading strides, unit last stride. Kernels fall back to pointer loads otherwise."""
    if TensorDescriptor is None:
        return False
    for t in tensors:
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any(stride * t.element_size() % 16 for stride in t.stride()[:-1]):
            return False
        if t.is_cuda and _major_capability(t.device.index) < 9:
            return False
    return True


@functools.lru_cache(maxsize=None)
def _major_capability(index: int | None) -> int:
    """The GPU's compute capability major, once per device (a host query otherwise made for every tensor)."""
    return torch.cuda.get_device_capability(index)[0]


def tma_descriptor(t: torch.Tensor, shape, block):
    """A TMA descriptor over ``t``'s leading ``shape`` (with ``t``'s strides) moving ``block``-shaped tiles;
    elements past ``shape`` read as zero, so the descriptor's bounds do what a load mask does."""
    return TensorDescriptor(t, list(shape), list(t.stride()), list(block))


@triton.jit
def tma_weight_block(w_desc, expert, k, first_col, W_K_MAJOR: tl.constexpr, BLOCK_K: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    """The ``[BLOCK_K, BLOCK_N]`` MMA operand ``W[expert][k:, first_col:]`` through a 3-D descriptor of a
    per-expert weight (block ``[1, ., .]``: a tile never reaches into the next expert; zeros past the edges).

    ``W_K_MAJOR``: the weight is stored ``[E, N, K]`` (nn.Linear: the forward), so the tile is loaded ``[N, K]``
    and used transposed (wgmma reads it K-major from shared memory, no data moves); else ``[E, K, N]``.
    """
    if W_K_MAJOR:
        return tl.trans(tl.reshape(w_desc.load([expert, first_col, k]), (BLOCK_N, BLOCK_K)))
    else:
        return tl.reshape(w_desc.load([expert, k, first_col]), (BLOCK_K, BLOCK_N))


# --------------------------------------------------------------------------------------------------------
# Fixed tile configurations (no autotuning: reproducible runs)
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TileConfig:
    """One kernel's launch shape.

    ``block_m`` x ``block_n`` is the output tile and ``block_k`` the reduction step (for the weight-gradient
    kernel: ``block_m`` x ``block_n`` tile of dW, ``block_k`` rows per step). ``group_m``: row tiles per
    L2 group (:func:`grouped_program_order`). ``tma``: load the GEMM operands with Hopper's tensor memory
    accelerator (host-side tensor descriptors) instead of per-thread pointer loads, where the kernel supports
    it (the grouped GEMMs of :mod:`.grouped_gemm`, the bf16 / fp32 SwiGLU GEMMs of :mod:`.swiglu`) and the
    operands are 16-byte aligned; it changes how tiles reach shared memory, not the arithmetic.

    ``tma_store``: the weight-gradient kernel stores its finished dW tile with one TMA store instead of
    per-thread stores; the same values (alone 1.006x, round 28; the strip kernel below stores only this way).
    ``strip`` (the ``wgrad_few_rows`` entry): where experts have few rows (at most one and a half tiles each, on
    average), the weight gradient runs a program per ``strip`` consecutive ``block_n``-wide blocks of dW instead
    of one block (:func:`mok.triton_ref.grouped_gemm.grouped_wgrad`): the expert's G steps are loaded once and the
    blocks' loads and TMA stores overlap in one pipelined loop; 0: never. The same values.
    """

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 8
    num_stages: int = 3
    tma: bool = False
    tma_store: bool = False
    strip: int = 0


def rows_of(t: torch.Tensor, part: slice) -> torch.Tensor:
    """``t[part]`` along dim 0, or ``t`` itself when ``part`` covers all of it: even a no-op slice is an aten op
    (about 1.5 us of host time on the CPU), and with one rank and one minibatch most of a pass's slices are."""
    whole = not part.start and (part.stop is None or part.stop >= t.shape[0])
    return t if whole else t[part]


def in_dtype(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``t.to(dtype)``, without its ~1.3 us of argument parsing when ``t`` has that dtype already (``t`` itself)."""
    return t if t.dtype == dtype else t.to(dtype)


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` of host integers. Plain Python: ``triton.cdiv`` is a constexpr function (Triton 3.9), and
    each host call of it cost about 3 us on the CPU machine, a few dozen of them per layer backward (round 26)."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """The smallest power of two at least ``n`` (0 for 0), as ``triton.next_power_of_2`` gives it, in plain Python."""
    return 1 << (int(n) - 1).bit_length() if n > 0 else 0


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, next_power_of_2(max(int(n), 1)))


# Hopper, bf16 operands. 128-row tiles match the schedule's default expert padding (one expert per tile);
# K steps of 64 bf16 = 128 bytes per row feed the 128-byte shared-memory swizzle. See each kernel's docstring
# for why its N width was chosen. Switching a default is one line here; experiments/tune_triton.py measures
# the candidates on the H200.
# Register use was read from ptxas (offline sm_90 compiles): every entry runs without spills.
_GPU_BF16 = {
    # Chosen from experiments/tune_triton.py on an H200, 2026-11-29 (commit cdc6b12; experiments/results/
    # tune_triton_20261129.json): each is bitwise identical to the previous default at anchor-4, anchor-5 and
    # kimi-k2.7/ep64, and faster by the geometric-mean factor noted.
    # Round 28 (experiments/results/h200_2026-11-30_round28): TMA loads for the two SwiGLU GEMMs (call 2: gate/up
    # 1.09-1.28x, down dgrad 1.03-1.22x at anchor-2, anchor-5 and the kimi slice) and the wgrad's TMA store (call 1:
    # 1.006x); each bitwise the same as before.
    "gate_up_swiglu": TileConfig(128, 128, 64, 16, 8, 3, tma=True),  # block_n per gate and per up: 256 columns
    "down_forward": TileConfig(128, 128, 64, 8, 8, 3, tma=True),     # push epilogue; 1.20x
    "down_dgrad_swiglu": TileConfig(128, 128, 64, 8, 8, 4, tma=True),  # SwiGLU-backward epilogue in column halves
    "dx_dgrad": TileConfig(128, 256, 64, 8, 8, 3, tma=True),         # push epilogue in column halves; 1.06x
    "wgrad": TileConfig(128, 128, 64, 8, 8, 3, tma=True, tma_store=True),  # 128 x 128 block of dW, 64 rows/step
    # The wgrad where experts have few rows (the strip kernel; grouped_wgrad): a program per row of 128 x 64 blocks
    # (64 blocks: every model's Q), 4 stages. At the kimi EP-2 load (85 rows per expert) 1.48x the general kernel
    # (calls 2-5: 8.72 -> 5.88 ms), at a glm-5.2 EP-2 load (128) 1.02x; bitwise the same.
    "wgrad_few_rows": TileConfig(128, 64, 64, 8, 8, 4, tma=True, tma_store=True, strip=64),
}
# Where a kernel's best tile depends on the reduction depth: {kernel: (deepest k, config)}, used for k <= the limit.
_GPU_BF16_SHORT_K = {
    # Round 28 (experiments/results/h200_2026-11-30_round28, calls 1-2): dx's reduction is 2I. 128 x 128 blocks (two
    # CTAs per SM, so one CTA's push epilogue overlaps the other's main loop) against 128 x 256, bitwise the same:
    # 1.32x at anchor-2 and 1.37x at anchor-1 (K = 512), 1.04x at anchor-3 and 1.01x at the qwen slice (K = 2048),
    # 0.98-0.99x at anchor-5 and the kimi slice (K = 4096).
    "dx_dgrad": (2048, TileConfig(128, 128, 64, 8, 8, 3, tma=True)),
}
# fp32 operands (correctness mode): 4-byte operands, so smaller tiles to fit shared memory.
_GPU_FP32 = {name: TileConfig(64, 64, 32, 8, 4, 2) for name in _GPU_BF16}
_GPU_FP32["gate_up_swiglu"] = TileConfig(64, 32, 32, 8, 4, 2)
# (fp32's wgrad_few_rows has strip 0: the general kernel.)


# --------------------------------------------------------------------------------------------------------
# Overrides (experiments only: the defaults above are what mok runs)
# --------------------------------------------------------------------------------------------------------
_FIELDS = tuple(f.name for f in dataclasses.fields(TileConfig))
_OVERRIDES: dict[str, dict] = {}


def _override_fields(kernel: str, value) -> dict:
    """One override entry as ``{field: value}``: a TileConfig, a dict of fields, or a list in field order."""
    if kernel != "*" and kernel not in _GPU_BF16:
        raise ValueError(f"config override for unknown kernel {kernel!r}; known: {sorted(_GPU_BF16)} or '*'")
    if isinstance(value, TileConfig):
        return dataclasses.asdict(value)
    if isinstance(value, (list, tuple)):
        if not 3 <= len(value) <= len(_FIELDS):
            raise ValueError(f"config override for {kernel!r}: a list needs 3..{len(_FIELDS)} values {_FIELDS}")
        value = dict(zip(_FIELDS, value))
    if not isinstance(value, Mapping) or not set(value) <= set(_FIELDS):
        raise ValueError(f"config override for {kernel!r}: expected fields of {_FIELDS}, got {value!r}")
    return dict(value)


def parse_config_overrides(text: str) -> dict[str, dict]:
    """Overrides from JSON text: ``{kernel: fields}`` where ``kernel`` is a name of the config table (or
    ``"*"`` for every kernel) and ``fields`` a dict of :class:`TileConfig` fields or a list in field order,
    e.g. ``{"wgrad": [128, 256, 64, 8, 8, 3, true], "*": {"tma": true}}``."""
    raw = json.loads(text) if text.strip() else {}
    if not isinstance(raw, Mapping):
        raise ValueError("MOK_TRITON_CONFIGS must be a JSON object {kernel: config}")
    return {str(kernel): _override_fields(kernel, value) for kernel, value in raw.items()}


@contextlib.contextmanager
def override_configs(overrides: Mapping[str, object]) -> Iterator[None]:
    """Run the enclosed code with some kernels' configurations replaced (fields of a :class:`TileConfig`,
    a whole TileConfig, or a list in field order; ``"*"`` applies to every kernel, a named entry wins).

    The usual clamping still applies (``block_m`` never exceeds the schedule tile, ...). A configuration
    picked inside the block must be picked inside it again wherever its shape matters later (e.g. the number
    of router-gradient partials of the down dgrad): run a whole forward and backward inside one block.
    """
    parsed = {str(kernel): _override_fields(kernel, value) for kernel, value in overrides.items()}
    previous = dict(_OVERRIDES)
    _OVERRIDES.update(parsed)
    _CONFIGS.clear()
    try:
        yield
    finally:
        _OVERRIDES.clear()
        _OVERRIDES.update(previous)
        _CONFIGS.clear()


def active_overrides() -> dict[str, dict]:
    """The overrides in force (a copy)."""
    return {kernel: dict(fields) for kernel, fields in _OVERRIDES.items()}


def _with_overrides(kernel: str, cfg: TileConfig) -> TileConfig:
    fields = {**_OVERRIDES.get("*", {}), **_OVERRIDES.get(kernel, {})}
    return dataclasses.replace(cfg, **fields) if fields else cfg


_OVERRIDES.update(parse_config_overrides(os.environ.get("MOK_TRITON_CONFIGS", "")))


# --------------------------------------------------------------------------------------------------------
# Configuration lookup
# --------------------------------------------------------------------------------------------------------
def default_config(kernel: str, dtype: torch.dtype, k: int | None = None) -> TileConfig:
    """The table entry of ``kernel`` on the GPU for a ``k``-deep reduction (None: the general entry), before
    overrides and clamping to the problem."""
    table = _GPU_FP32 if dtype == torch.float32 else _GPU_BF16
    if kernel not in table:
        raise KeyError(f"no tile configuration for kernel {kernel!r}; known: {sorted(table)}")
    if table is _GPU_BF16 and k is not None and kernel in _GPU_BF16_SHORT_K:
        deepest, short = _GPU_BF16_SHORT_K[kernel]
        if k <= deepest:
            return short
    return table[kernel]


# The configurations looked up so far (a lookup is a pure function of its arguments and the overrides, and a layer
# backward asks for the same few a dozen times: round 26's CPU profile put ~100 us of host time per call there).
# Emptied whenever the overrides change.
_CONFIGS: dict[tuple, TileConfig] = {}


def _remembered(lookup):
    @functools.wraps(lookup)
    def remembered(*args, **kwargs):
        key = (lookup.__name__, args, tuple(sorted(kwargs.items())))
        config = _CONFIGS.get(key)
        if config is None:
            config = _CONFIGS[key] = lookup(*args, **kwargs)
        return config
    return remembered


@_remembered
def gemm_config(kernel: str, dtype: torch.dtype, tile_rows: int, n: int, k: int) -> TileConfig:
    """The fixed configuration of ``kernel`` for an ``n``-wide output with a ``k``-deep reduction.

    ``block_m`` never exceeds the schedule tile (``tile_rows``), so a row tile never spans two experts.
    Under the interpreter the blocks are as large as the (tiny) problem: the interpreter pays per program
    and per operation, not per element.
    """
    if INTERPRETING:
        cfg = TileConfig(tile_rows, min(_pow2_at_least(n), 128), min(_pow2_at_least(k), 128), 4, 4, 1)
    else:
        cfg = default_config(kernel, dtype, k)
    cfg = _with_overrides(kernel, cfg)
    return dataclasses.replace(cfg, block_m=min(cfg.block_m, tile_rows),
                               block_n=min(cfg.block_n, _pow2_at_least(n)), block_k=min(cfg.block_k, _pow2_at_least(k)))


@_remembered
def wgrad_config(dtype: torch.dtype, tile_rows: int, p: int, q: int, kernel: str = "wgrad") -> TileConfig:
    """The weight-gradient kernel's configuration: a ``block_m`` x ``block_n`` block of a ``[P, Q]`` dW per
    program, ``block_k`` rows per MMA step (never more than a schedule tile, so a step stays in one tile).
    ``kernel="wgrad_few_rows"``: the strip kernel's (``strip`` 0: not used; the interpreter's default)."""
    if INTERPRETING:
        cfg = TileConfig(min(_pow2_at_least(p), 128), min(_pow2_at_least(q), 128), tile_rows, 4, 4, 1)
    else:
        cfg = default_config(kernel, dtype)
    cfg = _with_overrides(kernel, cfg)
    return dataclasses.replace(cfg, block_m=min(cfg.block_m, _pow2_at_least(p)),
                               block_n=min(cfg.block_n, _pow2_at_least(q)), block_k=min(cfg.block_k, tile_rows))


# --------------------------------------------------------------------------------------------------------
# Buffers
# --------------------------------------------------------------------------------------------------------
_POISON = {"on": os.environ.get("MOK_TRITON_POISON") == "1"}


def set_poison(enabled: bool) -> bool:
    """Fill every buffer the pipeline allocates with NaN (tests: an element no kernel wrote shows up as NaN
    instead of stale memory; see :func:`poison_`). Returns the previous setting."""
    previous = _POISON["on"]
    _POISON["on"] = bool(enabled)
    return previous


def poison_(t: torch.Tensor) -> torch.Tensor:
    """When poisoning is on, fill ``t`` in place with NaN (floating tensors) or 0xFF bytes (uint8: packed MXFP8
    rows, where 0xFF is the E4M3 NaN code and the E8M0 NaN scale, so an unwritten row dequantizes to NaN)."""
    if _POISON["on"]:
        if t.is_floating_point():
            t.fill_(float("nan"))
        elif t.dtype == torch.uint8:
            t.fill_(0xFF)
    return t


def fresh(shape, dtype: torch.dtype, device) -> torch.Tensor:
    """``torch.empty``, poisoned when poisoning is on (:func:`poison_`)."""
    return poison_(torch.empty(shape, dtype=dtype, device=device))
