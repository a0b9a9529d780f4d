"""Overlap granularity: SM-wave arithmetic for expert-grouped GEMMs, and pluggable minibatch policies.

MoK overlaps communication with computation at minibatch granularity and sizes a minibatch so that each
expert-grouped GEMM inside it runs at least two full waves of tiles over the SMs: fewer tiles leave SMs idle
in the last wave, and many more make the minibatch (and so the exposed first dispatch and last combine) long.

The threshold (derived here; it reproduces MoK's published 2,368 tokens)
-------------------------------------------------------------------------
A grouped GEMM over ``M`` routed rows producing ``N`` columns, tiled ``BLOCK_M x BLOCK_N``, has
``(M / BLOCK_M) * ceil(N / BLOCK_N)`` output tiles. ``waves`` full waves over ``S`` SMs need
``waves * S`` tiles, so

    M* = waves * S * BLOCK_M / ceil(N / BLOCK_N)

A layer has two grouped GEMMs per minibatch: gate/up (``N = 2I``) and down (``N = H``); the one with fewer
column tiles needs the most rows, so it sets the threshold. Kimi K2.5 (H 7168, I 2048) on a GB300 (148 SMs)
with 128 x 256 tiles: gate/up has ceil(4096 / 256) = 16 column tiles, so M* = 2 * 148 * 128 / 16 = **2,368**,
MoK's number. The same shape on an H200 (132 SMs): 2 * 132 * 128 / 16 = 2,112.

Policies
--------
A policy maps (shape, device, config) to ``minibatch_rows``, a whole number of tiles. ``"two_wave"`` is MoK's
rule: the threshold rounded up to a tile. mok's default, ``"four_wave"``, is the same rule at four waves: twice
the rows per ring step, so half the step boundaries (each a partly idle last wave and a round of dependency waits)
and a first dispatch twice as long. On the H200 that gave the megakernel 0.95-0.98x the time at the ring-mode shapes
(round 36, below); which of the boundaries' costs it saves was not measured. Register your own with
:func:`register_policy` and select it with ``MoKConfig(policy=...)``; ``notebooks/overlap_granularity.ipynb``
shows how to evaluate one.

Measured (round 36, H200, the megakernel alone, A/B in one process, outputs bitwise equal; B/A time of four waves
against two): anchor-3 0.974, anchor-4 0.984, anchor-5 0.978, the qwen slice 0.949, kimi 0.994, deepseek 0.993,
glm 1.005; anchors 1-2 (gather mode, already 16,896 rows) 0.991-0.994. Six waves: 0.970 / 0.995 / 0.971 and
0.978-0.994 on the slices; three: 0.963-1.010. The Triton pipeline with it: 1.001 / 1.006 at anchors 3 and 5,
0.971 at the qwen slice. The minibatch size never changes results (tests/test_determinism.py, and
tests/test_cuda_gpu.py for the megakernel).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from .config import MoEShape, MoKConfig


@dataclass(frozen=True)
class DeviceSpec:
    """What the wave arithmetic needs to know about a GPU."""

    name: str
    num_sms: int


GB300 = DeviceSpec("GB300", 148)
B300 = DeviceSpec("B300", 148)
H200 = DeviceSpec("H200", 132)
H100 = DeviceSpec("H100-SXM", 132)
KNOWN_DEVICES = {d.name: d for d in (GB300, B300, H200, H100)}

# Tile shape the wave arithmetic assumes (per SM): 128 x 256 matches a Hopper kernel with two consumer
# warpgroups and a Blackwell 2-CTA UMMA pair split per SM.
BLOCK_M = 128
BLOCK_N = 256


def device_spec(device: torch.device | str | None = None) -> DeviceSpec:
    """The spec of a CUDA device (its real SM count), or of the H200 when there is no GPU."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    if device.type != "cuda":
        return H200
    props = torch.cuda.get_device_properties(device)
    return DeviceSpec(props.name, props.multi_processor_count)


def column_tiles(n: int, block_n: int = BLOCK_N) -> int:
    return math.ceil(n / block_n)


def gemm_tiles(m: int, n: int, block_m: int = BLOCK_M, block_n: int = BLOCK_N) -> int:
    """Output tiles of one ``M x N`` GEMM."""
    return math.ceil(m / block_m) * column_tiles(n, block_n)


def waves(tiles: int, num_sms: int) -> float:
    """Tiles over SMs: 1.0 is one full wave; the fractional part is the partly idle last wave."""
    return tiles / num_sms


def wave_efficiency(tiles: int, num_sms: int) -> float:
    """Busy SM-time over reserved SM-time when ``tiles`` equal tiles run in ceil(waves) waves."""
    return tiles / (math.ceil(tiles / num_sms) * num_sms) if tiles else 0.0


def two_wave_threshold(hidden: int, intermediate: int, device: DeviceSpec, *, min_waves: float = 2.0,
                       block_m: int = BLOCK_M, block_n: int = BLOCK_N) -> float:
    """Routed rows per minibatch at which both grouped GEMMs of a layer reach ``min_waves`` full waves."""
    fewest_column_tiles = min(column_tiles(2 * intermediate, block_n), column_tiles(hidden, block_n))
    return min_waves * device.num_sms * block_m / fewest_column_tiles


# --------------------------------------------------------------------------------------------------------
# Minibatch policies
# --------------------------------------------------------------------------------------------------------

MinibatchPolicy = Callable[[MoEShape, DeviceSpec, MoKConfig], int]
_POLICIES: dict[str, MinibatchPolicy] = {}


def register_policy(name: str) -> Callable[[MinibatchPolicy], MinibatchPolicy]:
    """Decorator: ``@register_policy("mine") def mine(shape, device, config) -> rows``."""
    def wrap(fn: MinibatchPolicy) -> MinibatchPolicy:
        _POLICIES[name] = fn
        return fn
    return wrap


def get_policy(name: str) -> MinibatchPolicy:
    if name not in _POLICIES:
        raise ValueError(f"unknown minibatch policy {name!r}; registered: {sorted(_POLICIES)}")
    return _POLICIES[name]


def policies() -> list[str]:
    return sorted(_POLICIES)


def round_to_tiles(rows: float, tile: int) -> int:
    return max(1, math.ceil(rows / tile)) * tile


def wave_rule_rows(shape: MoEShape, device: DeviceSpec, config: MoKConfig, min_waves: float) -> int:
    """The smallest whole number of tiles that gives both grouped GEMMs ``min_waves`` full SM waves."""
    return round_to_tiles(two_wave_threshold(shape.hidden, shape.intermediate, device, min_waves=min_waves),
                          config.expert_padding)


@register_policy("two_wave")
def two_wave_policy(shape: MoEShape, device: DeviceSpec, config: MoKConfig) -> int:
    """MoK's rule: the smallest whole number of tiles that gives both grouped GEMMs two full SM waves."""
    return wave_rule_rows(shape, device, config, 2.0)


@register_policy("four_wave")
def four_wave_policy(shape: MoEShape, device: DeviceSpec, config: MoKConfig) -> int:
    """mok's default (:class:`mok.MoKConfig`): the wave rule at four waves, twice MoK's rows per ring step."""
    return wave_rule_rows(shape, device, config, 4.0)


@register_policy("whole")
def whole_layer_policy(shape: MoEShape, device: DeviceSpec, config: MoKConfig) -> int:
    """No minibatching: one minibatch for all routed rows (DeepEP-style coarse overlap)."""
    return round_to_tiles(shape.rows + shape.num_experts * (config.expert_padding - 1), config.expert_padding)


def rank_minibatch_rows(tokens_per_rank: int, hidden: int, intermediate: int, local_experts: int, top_k: int,
                        device: torch.device | str | None, config: MoKConfig) -> int:
    """Minibatch rows for one expert-parallel rank: the policy sees that rank's share of the layer (its tokens and
    local experts) and the real SM count of ``device``. Every backend that walks a ring asks here."""
    shape = MoEShape("rank", tokens_per_rank, hidden, intermediate, local_experts, top_k)
    return minibatch_rows(shape, device_spec(device), config)


def minibatch_rows(shape: MoEShape, device: DeviceSpec, config: MoKConfig) -> int:
    """``config.minibatch_rows`` if set, else the configured policy's choice (a multiple of the tile)."""
    if config.minibatch_rows is not None:
        return config.minibatch_rows
    rows = int(get_policy(config.policy)(shape, device, config))
    if rows <= 0 or rows % config.expert_padding:
        raise ValueError(f"minibatch policy {config.policy!r} returned {rows} rows; expected a positive "
                         f"multiple of expert_padding ({config.expert_padding})")
    return rows
