"""Shapes and knobs.

Two kinds of object live here:

* :class:`MoEShape`: the size of one MoE layer problem (tokens, hidden, intermediate, experts, top-k), with
  named presets for the four models MoK reports on, their EP-64 per-GPU slices, the five single-GPU anchor
  shapes we benchmark against PyTorch and SonicMoE, and tiny shapes for CPU tests.
* :class:`MoKConfig`: how mok runs a layer (expert padding tile, minibatch size, ring size, communication
  SMs). Every knob has a default; ``None`` means "ask the heuristics" (see :mod:`mok.heuristics`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class MoEShape:
    """One MoE layer problem.

    ``tokens`` counts tokens before routing (the layer then processes ``tokens * top_k`` routed rows).
    FLOPs follow background.md: ``6 * T * K * H * I`` forward (gate, up and down GEMMs, 2 FLOPs per MAC),
    twice that backward (dgrad and wgrad); the router is excluded.
    """

    name: str
    tokens: int
    hidden: int
    intermediate: int
    num_experts: int
    top_k: int

    @property
    def rows(self) -> int:
        """Routed rows: every (token, k) pair is one row of an expert GEMM."""
        return self.tokens * self.top_k

    @property
    def forward_flops(self) -> int:
        return 6 * self.tokens * self.top_k * self.hidden * self.intermediate

    @property
    def backward_flops(self) -> int:
        return 2 * self.forward_flops

    def with_tokens(self, tokens: int) -> "MoEShape":
        return dataclasses.replace(self, tokens=tokens)

    def describe(self) -> str:
        return (f"T={self.tokens} H={self.hidden} I={self.intermediate} "
                f"E={self.num_experts} K={self.top_k}")


@dataclass(frozen=True)
class ModelSpec:
    """An MoE model's routed-expert geometry (background.md, section 2)."""

    name: str
    num_experts: int
    hidden: int
    intermediate: int
    top_k: int

    def layer(self, tokens: int) -> MoEShape:
        return MoEShape(self.name, tokens, self.hidden, self.intermediate, self.num_experts, self.top_k)

    def ep_slice(self, ep_size: int = 64, tokens_per_gpu: int = 2048) -> MoEShape:
        """What one GPU computes at expert-parallel degree ``ep_size``.

        Each GPU holds ``E / ep_size`` experts and receives about ``tokens_per_gpu * top_k`` rows. As a
        single-GPU problem this is ``tokens_per_gpu * top_k`` tokens routed top-1 over the local experts:
        the same GEMM work (rows x local experts), without the cross-GPU combine.
        """
        local_experts = self.num_experts // ep_size
        return MoEShape(f"{self.name}/ep{ep_size}", tokens_per_gpu * self.top_k, self.hidden,
                        self.intermediate, local_experts, 1)


MODELS: dict[str, ModelSpec] = {
    "kimi-k2.7": ModelSpec("kimi-k2.7", 384, 7168, 2048, 8),
    "glm-5.2": ModelSpec("glm-5.2", 256, 6144, 2048, 8),
    "qwen3.5-397b": ModelSpec("qwen3.5-397b", 512, 4096, 1024, 10),
    "deepseek-v4-pro": ModelSpec("deepseek-v4-pro", 384, 7168, 3072, 6),
}

# The five shapes measured on one H200 with PyTorch and SonicMoE (background.md, section 4).
ANCHOR_SHAPES: list[MoEShape] = [
    MoEShape("anchor-1", 24576, 1536, 256, 128, 8),
    MoEShape("anchor-2", 32768, 4096, 256, 256, 16),
    MoEShape("anchor-3", 32768, 4096, 1024, 64, 4),
    MoEShape("anchor-4", 32768, 4096, 2048, 64, 4),
    MoEShape("anchor-5", 8192, 7168, 2048, 64, 8),
]

EP64_SLICES: list[MoEShape] = [m.ep_slice(64) for m in MODELS.values()]

# Tiny shapes: fast under the Triton interpreter on a CPU, yet with several experts, several tiles per
# expert and top-k > 1, so schedules, padding and the fixed-order combine are all exercised.
TEST_SHAPES: list[MoEShape] = [
    MoEShape("tiny", 64, 64, 32, 8, 2),
    MoEShape("tiny-wide", 96, 96, 48, 16, 4),
    MoEShape("tiny-top1", 48, 32, 64, 4, 1),
]

PRESETS: dict[str, MoEShape] = {s.name: s for s in [*TEST_SHAPES, *ANCHOR_SHAPES, *EP64_SLICES]}
PRESETS.update({f"{name}": spec.layer(2048) for name, spec in MODELS.items()})


def get_shape(spec: str) -> MoEShape:
    """A preset name, or ``"T,H,I,E,K"`` for a custom shape."""
    if spec in PRESETS:
        return PRESETS[spec]
    parts = spec.split(",")
    if len(parts) == 5 and all(p.strip().isdigit() for p in parts):
        t, h, i, e, k = (int(p) for p in parts)
        return MoEShape(f"custom-{t}x{h}x{i}x{e}x{k}", t, h, i, e, k)
    raise ValueError(f"unknown shape {spec!r}: expected one of {sorted(PRESETS)} or 'T,H,I,E,K'")


@dataclass(frozen=True)
class MoKConfig:
    """How mok runs a layer.

    Attributes:
        expert_padding: every local expert's segment of the schedule table is padded to a multiple of this
            many rows; it is also the GEMM tile height (BLOCK_M), so a tile never spans two experts.
        minibatch_rows: rows per minibatch of the ring (a multiple of ``expert_padding``). ``None`` asks the
            minibatch policy (default: the SM-wave rule of :mod:`mok.heuristics` at four waves).
        ring_rows: capacity of the ring token buffer in rows (a multiple of ``minibatch_rows``). The forward
            walks the schedule in minibatches through the ring; the backward walks it in reverse and replays
            the forward only for minibatches the ring has since overwritten. ``None``: the ring holds the
            whole schedule (nothing is replayed).
        capacity_rows: rows each rank's schedule table can hold, padding included. ``None`` uses the
            worst case that routing allows, so it can never overflow and needs no host synchronisation.
            A smaller capacity saves memory; exceeding it raises an error (tokens are never dropped).
        comm_sms: SMs to reserve for dispatch and combine (MoK's design). The SM90 megakernel does not read it:
            there dispatch and combine are tasks in the same ticket stream, run by whichever SM takes them
            (mok/cuda/README.md). Its dispatch mode and variant are chosen with ``MOK_CUDA_DISPATCH`` and
            ``MOK_CUDA_VARIANT`` (mok/cuda/backend.py).
        policy: name of the registered minibatch policy used when ``minibatch_rows`` is ``None``:
            ``"four_wave"`` (mok's default on Hopper), ``"two_wave"`` (MoK's rule), ``"whole"`` or your own.
    """

    expert_padding: int = 128
    minibatch_rows: int | None = None
    ring_rows: int | None = None
    capacity_rows: int | None = None
    comm_sms: int = 8
    policy: str = "four_wave"

    def __post_init__(self) -> None:
        if self.expert_padding <= 0 or self.expert_padding & (self.expert_padding - 1):
            raise ValueError(f"MoKConfig.expert_padding must be a positive power of two, got {self.expert_padding}")
        if self.minibatch_rows is not None and (
                self.minibatch_rows <= 0 or self.minibatch_rows % self.expert_padding):
            raise ValueError(f"MoKConfig.minibatch_rows must be a positive multiple of expert_padding "
                             f"({self.expert_padding}), got {self.minibatch_rows}")
        if self.ring_rows is not None:
            if self.ring_rows <= 0 or self.ring_rows % self.expert_padding:
                raise ValueError(f"MoKConfig.ring_rows must be a positive multiple of expert_padding "
                                 f"({self.expert_padding}), got {self.ring_rows}")
            if self.minibatch_rows is not None and self.ring_rows % self.minibatch_rows:
                raise ValueError(f"MoKConfig.ring_rows ({self.ring_rows}) must be a multiple of "
                                 f"minibatch_rows ({self.minibatch_rows})")
        if self.capacity_rows is not None and (
                self.capacity_rows <= 0 or self.capacity_rows % self.expert_padding):
            raise ValueError(f"MoKConfig.capacity_rows must be a positive multiple of expert_padding "
                             f"({self.expert_padding}), got {self.capacity_rows}")
        if self.comm_sms < 0:
            raise ValueError(f"MoKConfig.comm_sms must be >= 0, got {self.comm_sms}")

    def replace(self, **changes) -> "MoKConfig":
        return dataclasses.replace(self, **changes)
