"""Where the Triton MoE pipeline's time goes, stage by stage, and which tile configurations are fastest.

One call on the H200 (``--budget`` caps the measuring, default 170 s; the run recorded in
experiments/results/tune_triton_20261129.json took 46 s with ``--budget 140``)::

    python3 experiments/tune_triton.py                         # anchor-4, anchor-5, kimi-k2.7/ep64
    python3 experiments/tune_triton.py --shapes anchor-4 --kernels wgrad,dx_dgrad --budget 90
    TRITON_INTERPRET=1 python3 experiments/tune_triton.py --device cpu --shapes tiny   # smoke test (CPU)

Per shape (EP 1, one minibatch over the whole schedule table, tile 128: what ``python -m mok bench`` runs):

1. **layer**: ``mok.moe`` forward and forward+backward, backends ``triton`` and ``torch`` (router excluded;
   backward = median(fwd+bwd) - median(fwd), as the benchmark does).
2. **stages**: every stage of the Triton forward and backward alone, in pipeline order, with the default
   configurations (CUDA events, median after warm-up); TFLOP/s for the GEMM stages and GB/s for the
   transfers, counting the real routed rows (padding excluded) as the benchmark does.
3. **torch**: the same GEMMs with ``torch._grouped_mm`` and its autograd (what the PyTorch baseline runs).
4. **candidates**: for each GEMM kernel, candidate :class:`TileConfig` s applied through
   :func:`mok.triton_ref._common.override_configs`. A candidate that fails to compile or spills registers
   is skipped; otherwise its outputs are compared with the default configuration's (relative error < 1e-2;
   bitwise equality is reported too) and it is timed. The winner per kernel and shape is printed, and per
   kernel the candidate with the best geometric-mean speed-up over all shapes, as the line to put in
   ``mok/triton_ref/_common.py``.

Compiling the candidates costs more than timing them, so they are compiled first in ``--jobs`` worker
processes on a tiny problem with the same specialisation (Triton's disk cache then serves the real runs;
``TRITON_CACHE_DIR`` defaults to ``build/mok-cache/triton`` as in ``experiments/gpu_run.sh``).

Output: a compact table last on stdout; JSON to ``$OUT/tune_triton.json`` when ``$OUT`` is set (and to
``--json PATH``).
"""

from __future__ import annotations

import argparse
import concurrent.futures as futures
import contextlib
import dataclasses
import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRITON_CACHE_DIR", str(ROOT / "build" / "mok-cache" / "triton"))

import torch  # noqa: E402

import mok  # noqa: E402
from mok.bench.harness import collect_metadata, gbps, geomean, tflops, time_fn  # noqa: E402
from mok.config import MoEShape, get_shape  # noqa: E402
from mok.schedule import build_schedule  # noqa: E402
from mok.triton_ref import _common, grouped_gemm, pull_dispatch, push_combine, swiglu  # noqa: E402
from mok.triton_ref._common import TileConfig, override_configs  # noqa: E402
from mok.triton_ref.pipeline import EmulatedRankGroup  # noqa: E402
from mok.triton_ref.push_combine import SlotPush  # noqa: E402
from mok.validate import bitwise_equal, relative_error  # noqa: E402

TILE = 128
DEFAULT_SHAPES = "anchor-4,anchor-5,kimi-k2.7/ep64"
REL_TOL = 1e-2
T = TileConfig

# Candidate configurations per kernel, most promising first (the budget may cut the tail). The default
# (the _common.py table entry) is always measured first and is the reference. Offline sm_90 compiles
# (triton 3.6) of every entry here showed no spills (the pointer-load 128 x 256 / 256 x 128 wgrad spill, so
# only their TMA forms are listed). Registers below: the H200 run in experiments/results/tune_triton_20261129.json.
CANDIDATES: dict[str, list[TileConfig]] = {
    "wgrad": [
        # TMA: 109 registers, 96 KB smem -> 2 CTAs per SM. Pointer stores of the dW tile (the default stores it by
        # TMA since round 28: 1.006x at four shapes, call 1).
        T(128, 128, 64, 8, 8, 3, True),
        T(128, 256, 64, 8, 8, 3, True, True),
        T(128, 256, 64, 8, 8, 3, True),    # half the passes over the expert's rows (207 registers)
        T(256, 128, 64, 8, 8, 3, True),    # (192 registers)
        T(128, 256, 64, 8, 8, 4, True),
        T(256, 128, 64, 8, 8, 4, True),
        T(128, 128, 64, 8, 8, 4, True),
        T(128, 128, 128, 8, 8, 3, True),
        T(128, 128, 64, 8, 4, 4, True),
        T(128, 256, 64, 16, 8, 3, True),
        T(256, 128, 64, 4, 8, 3, True),
        T(128, 128, 64, 8, 8, 4, False),
    ],
    # The strip kernel where experts have few rows (only shapes with at most one and a half tiles per expert take
    # it: tune at EP-2 loads such as 2048,7168,2048,192,8). Round 28: a whole row of blocks per program 1.20-1.23x
    # the general kernel (call 2; 16 blocks 1.19x, 8 blocks 1.10-1.14x), 128 x 64 blocks 1.15x more (call 3).
    # block_k must stay the general kernel's (the host falls back otherwise). With more than three quarters of a
    # tile per expert the two-tile loop is compiled too (128 x 64: 180 KB of shared memory; 128 x 128 does not fit).
    "wgrad_few_rows": [
        T(128, 128, 64, 8, 8, 3, True, True, 0),   # strip 0: the general kernel, for comparison
        T(128, 64, 64, 8, 8, 2, True, True, 64),
        T(128, 64, 64, 8, 4, 3, True, True, 64),   # 96 KB of shared memory: two CTAs per SM
        T(128, 128, 64, 8, 8, 3, True, True, 64),
        T(128, 128, 64, 8, 8, 4, True, True, 64),
        T(128, 64, 64, 8, 8, 4, True, True, 64),
        T(128, 64, 64, 8, 4, 4, True, True, 64),
        T(128, 64, 64, 8, 8, 3, True, True, 16),
        T(64, 128, 64, 8, 4, 3, True, True, 64),
    ],
    "dx_dgrad": [
        T(128, 256, 64, 8, 8, 3, True),    # TMA: 181 registers (218 with pointer loads and 4 stages)
        T(128, 256, 64, 8, 8, 4, True),
        T(128, 128, 64, 8, 8, 3, True),    # 94 registers, 96 KB smem -> 2 CTAs per SM
        T(128, 128, 64, 8, 4, 4, True),
        T(128, 256, 64, 16, 8, 3, True),
        T(128, 256, 64, 4, 8, 3, True),
        T(128, 256, 64, 8, 8, 4, False),
    ],
    # swiglu.py's kernels: their epilogue sets the register budget (234 at 128 x 128): 128 x 256 and 4 warps at
    # 128 x 128 spill hundreds of LDL/STL, so they are not here. TMA operand loads are the defaults since round 28
    # (call 2, the same bits); the pointer forms stay for comparison. No spills (offline ptxas for sm_90a, triton
    # 3.9): down dgrad 239 registers with TMA, 243 without; gate/up 183, 220.
    "down_dgrad_swiglu": [
        T(128, 128, 64, 8, 8, 4),          # pointer loads: the default before round 28
        T(128, 128, 64, 16, 8, 3),
        T(128, 128, 64, 4, 8, 3),
        T(128, 64, 64, 8, 4, 4),
        T(128, 128, 64, 8, 8, 3, True),
    ],
    "down_forward": [
        T(128, 256, 64, 8, 8, 3, True),
        T(128, 256, 64, 8, 8, 4, True),
        T(128, 128, 64, 8, 8, 3, True),
    ],
    "gate_up_swiglu": [
        T(128, 128, 64, 8, 8, 4),
        T(128, 128, 64, 16, 8, 3),         # pointer loads: the default before round 28
        T(128, 64, 64, 8, 4, 4),
        T(128, 128, 64, 8, 8, 4, True),    # 192 KB of shared memory
    ],
}

# The stages each kernel runs: a candidate is timed over all of them.
KERNEL_STAGES = {
    "wgrad": ("wgrad_gate", "wgrad_up", "wgrad_down"),
    "wgrad_few_rows": ("wgrad_gate", "wgrad_up", "wgrad_down"),
    "dx_dgrad": ("dx_push",),
    "down_dgrad_swiglu": ("dgrad_swiglu",),
    "down_forward": ("down_push",),
    "gate_up_swiglu": ("gate_up",),
}


def describe(cfg: TileConfig) -> str:
    return (f"{'tma' if cfg.tma else 'ptr'}{'+store' if cfg.tma_store else ''} "
            f"{cfg.block_m}x{cfg.block_n}x{cfg.block_k} w{cfg.num_warps} s{cfg.num_stages} g{cfg.group_m}"
            f"{f' strip{cfg.strip}' if cfg.strip else ''}")


def config_line(kernel: str, cfg: TileConfig) -> str:
    flags = ((", tma=True" if cfg.tma else "") + (", tma_store=True" if cfg.tma_store else "")
             + (f", strip={cfg.strip}" if cfg.strip else ""))
    return (f'"{kernel}": TileConfig({cfg.block_m}, {cfg.block_n}, {cfg.block_k}, {cfg.group_m}, '
            f'{cfg.num_warps}, {cfg.num_stages}{flags}),')


# ========================================================================================================
# Timing
# ========================================================================================================
def time_ms(fn: Callable[[], object], device: torch.device, warmup: int, iters: int) -> float:
    """Median milliseconds of ``fn()`` after ``warmup`` calls (CUDA events; a host clock on a CPU)."""
    return time_fn(lambda _: fn(), device=device, warmup=warmup, iters=iters).median_ms


# ========================================================================================================
# One shape's stages (EP 1, one minibatch over the whole table: the pipeline's default path)
# ========================================================================================================
class Stages:
    """The inputs, buffers and stage calls of one layer shape, as :mod:`mok.triton_ref.pipeline` composes them
    for EP 1 and one minibatch. Every stage reads what the stages before it left, so call :meth:`run_all`
    once before timing any stage alone."""

    FORWARD = ("pull", "gate_up", "down_push", "combine_sum")
    BACKWARD = ("pull_rc", "dgrad_swiglu", "dx_push", "dw_push", "wgrad_gate", "wgrad_up", "wgrad_down", "dx_sum")

    def __init__(self, shape: MoEShape, device: torch.device, dtype=torch.bfloat16, seed: int = 0) -> None:
        self.shape, self.device, self.dtype = shape, device, dtype
        t, h, i, e, k = shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k
        gen = torch.Generator(device=device).manual_seed(seed)

        def randn(*size, scale=1.0):
            return (torch.randn(*size, generator=gen, device=device) * scale).to(dtype)

        self.x = randn(t, h)
        self.topk_weights, self.topk_ids = mok.route(torch.randn(t, e, generator=gen, device=device), k)
        self.w_gate = randn(e, i, h, scale=h ** -0.5)
        self.w_up = randn(e, i, h, scale=h ** -0.5)
        self.w_down = randn(e, h, i, scale=i ** -0.5)
        self.grad_out = randn(t, h)

        self.table = build_schedule(self.topk_ids, e, 1, TILE).rank(0)
        self.n = self.table.capacity
        self.used = self.table.rows_used()    # one host synchronisation, at set-up only
        self.weights = self.topk_weights.float().contiguous()

        def empty(*size, dtype=dtype):
            return torch.empty(*size, dtype=dtype, device=device)

        # source-side buffers: one rank's peer buffers over these tensors (EP 1: the source is the expert rank)
        peers = EmulatedRankGroup(1, device)
        self.x_buf = peers.wrap("x", self.x)
        self.grad_buf = peers.wrap("grad_out", self.grad_out)
        self.weight_buf = peers.wrap("topk_weights", self.weights.view(-1))
        self.combine = empty(t * k, h)
        self.combine_buf = peers.wrap("combine_slots", self.combine)
        self.out = empty(t, h)
        self.dx_slots = empty(t * k, h)
        self.dx_buf = peers.wrap("dx_slots", self.dx_slots)
        self.dw = empty(t * k, dtype=torch.float32)
        self.dw_buf = peers.wrap("dw_slots", self.dw)
        self.dx = empty(t, h)
        # expert-side rows (the ring minibatch and the backward's scratch)
        self.x_rows = empty(self.n, h)
        self.gate_up_rows = empty(self.n, 2 * i)
        self.h_rows = empty(self.n, i)
        self.grad_rows = empty(self.n, h)
        self.weight_rows = empty(self.n, dtype=torch.float32)
        self.d_gate_up = empty(self.n, 2 * i)
        self.hw = empty(self.n, i)
        self._partials: dict[int, torch.Tensor] = {}
        self.d_w_gate = empty(e, i, h)
        self.d_w_up = empty(e, i, h)
        self.d_w_down = empty(e, h, i)

    # ---- stage calls --------------------------------------------------------------------------------
    def partials(self) -> torch.Tensor:
        """The router-gradient partials buffer for the down-dgrad configuration in force."""
        s = self.shape
        count = swiglu.router_grad_partials(s.intermediate, s.hidden, self.dtype, TILE)
        if count not in self._partials:
            self._partials[count] = torch.empty(self.n, count, dtype=torch.float32, device=self.device)
        return self._partials[count]

    def run(self, stage: str) -> None:
        s, n, i = self.shape, self.n, self.shape.intermediate
        if stage == "pull":
            pull_dispatch.pull_token_rows(self.table, 0, n, self.x_buf, self.x_rows)
        elif stage == "gate_up":
            swiglu.gate_up_swiglu(self.x_rows, self.w_gate, self.w_up, self.table.tile_expert, TILE,
                                  gate_up_out=self.gate_up_rows, h_out=self.h_rows, n_rows=n)
        elif stage == "down_push":
            grouped_gemm.grouped_gemm_forward(self.h_rows, self.w_down, self.table.tile_expert, TILE, n_rows=n,
                                              push=SlotPush.window(self.table, 0, self.combine_buf))
        elif stage == "combine_sum":
            push_combine.weighted_sum_over_k(self.combine, self.weights, self.out)
        elif stage == "pull_rc":
            pull_dispatch.pull_reverse_combine(self.table, 0, n, self.grad_buf, self.weight_buf, self.grad_rows,
                                               self.weight_rows)
        elif stage == "dgrad_swiglu":
            swiglu.down_dgrad_swiglu_backward(self.grad_rows, self.w_down, self.weight_rows, self.gate_up_rows,
                                              self.table.tile_expert, TILE, d_gate_up_out=self.d_gate_up,
                                              hw_out=self.hw, dw_partial_out=self.partials(), n_rows=n)
        elif stage == "dx_push":
            grouped_gemm.grouped_gemm_dgrad(self.d_gate_up, (self.w_gate, self.w_up), self.table.tile_expert, TILE,
                                            n_rows=n, push=SlotPush.window(self.table, 0, self.dx_buf))
        elif stage == "dw_push":
            push_combine.push_router_grad(self.table, 0, n, self.partials(), self.dw_buf)
        elif stage in ("wgrad_gate", "wgrad_up", "wgrad_down"):
            g, a, out = {"wgrad_gate": (self.d_gate_up[:, :i], self.x_rows, self.d_w_gate),
                         "wgrad_up": (self.d_gate_up[:, i:], self.x_rows, self.d_w_up),
                         "wgrad_down": (self.grad_rows, self.hw, self.d_w_down)}[stage]
            grouped_gemm.grouped_wgrad(g, a, self.table.segment_offsets, 0, n, TILE, out=out, chain=None,
                                       load_chain=False, store_final=True, routed_rows=s.tokens * s.top_k)
        elif stage == "dx_sum":
            push_combine.sum_over_k(self.dx_slots, s.top_k, self.dx)
        else:
            raise KeyError(stage)

    def run_all(self) -> None:
        for stage in self.FORWARD + self.BACKWARD:
            self.run(stage)

    # ---- what each GEMM kernel writes (compared across configurations) -------------------------------
    def outputs(self, kernel: str) -> dict[str, torch.Tensor]:
        used = self.used
        if kernel in ("wgrad", "wgrad_few_rows"):
            return {"dW_gate": self.d_w_gate, "dW_up": self.d_w_up, "dW_down": self.d_w_down}
        if kernel == "dx_dgrad":
            return {"dx_slots": self.dx_slots}
        if kernel == "down_forward":
            return {"combine_slots": self.combine}
        if kernel == "down_dgrad_swiglu":
            return {"d_gate_up": self.d_gate_up[:used], "hw": self.hw[:used],
                    "dw": self.partials()[:used].sum(dim=1)}
        if kernel == "gate_up_swiglu":
            return {"gate_up": self.gate_up_rows[:used], "h": self.h_rows[:used]}
        raise KeyError(kernel)

    def poison(self, kernel: str) -> None:
        """NaN-fill what ``kernel`` writes, so an element a candidate fails to write cannot pass."""
        dw = (self.d_w_gate, self.d_w_up, self.d_w_down)
        targets = {"wgrad": dw, "wgrad_few_rows": dw, "dx_dgrad": (self.dx_slots,),
                   "down_forward": (self.combine,), "down_dgrad_swiglu": (self.d_gate_up, self.hw),
                   "gate_up_swiglu": (self.gate_up_rows, self.h_rows)}[kernel]
        for t in targets:
            t.fill_(float("nan"))
        if kernel == "down_dgrad_swiglu":
            self.partials().fill_(float("nan"))


def stage_work(shape: MoEShape, stage: str) -> tuple[float, float]:
    """(FLOPs, bytes) of a stage over the real routed rows R = T*K (padding excluded), bf16: the GEMMs' useful
    FLOPs, and the fewest bytes the stage must move (each operand and result once)."""
    r, t, h, i, e = shape.rows, shape.tokens, shape.hidden, shape.intermediate, shape.num_experts
    flops = {"gate_up": 2 * r * h * 2 * i, "down_push": 2 * r * i * h, "dgrad_swiglu": 2 * r * h * i,
             "dx_push": 2 * r * 2 * i * h, "wgrad_gate": 2 * r * i * h, "wgrad_up": 2 * r * i * h,
             "wgrad_down": 2 * r * h * i}.get(stage, 0)
    b = 2
    nbytes = {"pull": 2 * r * h * b, "combine_sum": r * h * b + t * h * b, "pull_rc": 2 * r * h * b + r * 8,
              "dw_push": r * 8, "dx_sum": r * h * b + t * h * b,
              "gate_up": r * h * b + 2 * e * i * h * b + 3 * r * i * b,
              "down_push": r * i * b + e * h * i * b + r * h * b,
              "dgrad_swiglu": r * h * b + e * h * i * b + 2 * r * i * b + 3 * r * i * b,
              "dx_push": 2 * r * i * b + 2 * e * i * h * b + r * h * b,
              "wgrad_gate": r * (i + h) * b + e * i * h * b, "wgrad_up": r * (i + h) * b + e * i * h * b,
              "wgrad_down": r * (h + i) * b + e * h * i * b}.get(stage, 0)
    return float(flops), float(nbytes)


STAGE_LABELS = {
    "pull": "fwd  pull dispatch", "gate_up": "fwd  gate/up GEMM + SwiGLU", "down_push": "fwd  down GEMM + push",
    "combine_sum": "fwd  weighted sum over k", "pull_rc": "bwd  pull reverse-combine",
    "dgrad_swiglu": "bwd  down dgrad + SwiGLU bwd", "dx_push": "bwd  dx GEMM + push", "dw_push": "bwd  dw push",
    "wgrad_gate": "bwd  wgrad W_gate", "wgrad_up": "bwd  wgrad W_up", "wgrad_down": "bwd  wgrad W_down",
    "dx_sum": "bwd  dx sum over k",
}


# ========================================================================================================
# Compile information (registers, spills) from Triton's in-process kernel caches
# ========================================================================================================
def _jit_functions():
    import triton
    for module in (grouped_gemm, swiglu):
        for value in vars(module).values():
            if isinstance(value, triton.runtime.jit.JITFunction):
                yield value


def compiled_kernels() -> dict[int, object]:
    """Every compiled kernel of the GEMM modules in this process, by id (empty if this Triton keeps its
    caches elsewhere: then no register verdicts, nothing else changes)."""
    found = {}
    try:
        for fn in _jit_functions():
            for caches in getattr(fn, "device_caches", {}).values():
                for kernel in caches[0].values():
                    found[id(kernel)] = kernel
    except Exception:  # noqa: BLE001
        return {}
    return found


def _local_memory_ops(kernel) -> int | None:
    """LDL/STL instructions in a kernel's SASS (register spills, also the stack spills that the driver's
    local-memory size does not count), read with the cuobjdump shipped in Triton's wheel; None if unavailable."""
    import triton
    tool = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    cubin = getattr(kernel, "asm", {}).get("cubin")
    if not tool.exists() or not cubin:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        sass = subprocess.run([str(tool), "-sass", f.name], capture_output=True, text=True, timeout=60).stdout
    return len(re.findall(r"\b(?:LDL|STL)\b", sass))


def compile_info(kernels) -> dict[str, object]:
    """Registers, spills (driver's count and LDL/STL in the SASS) and shared memory of newly compiled
    kernels (``None`` fields where unknown)."""
    info = {"regs": None, "spills": None, "local_ops": None, "smem": None}
    for k in kernels:
        for field, read in (("regs", lambda: int(k.n_regs)), ("spills", lambda: int(k.n_spills)),
                            ("smem", lambda: int(k.metadata.shared)), ("local_ops", lambda: _local_memory_ops(k))):
            try:
                value = read()
            except Exception:  # noqa: BLE001 - older/newer Triton: no number, no verdict
                value = None
            if value is not None:
                info[field] = max(info[field] or 0, value)
    return info


# ========================================================================================================
# Measurements of one shape
# ========================================================================================================
def layer_times(st: Stages, backend: str, warmup: int, iters: int) -> dict[str, float]:
    """``mok.moe`` forward and forward+backward milliseconds (router excluded), backward by difference."""
    leaves = [t.detach().requires_grad_(True) for t in (st.x, st.topk_weights, st.w_gate, st.w_up, st.w_down)]
    x, w, wg, wu, wd = leaves

    def fwd():
        return mok.moe(x, st.topk_ids, w, wg, wu, wd, backend=backend, check_inputs=False)

    def fwd_bwd():
        torch.autograd.grad(fwd(), leaves, st.grad_out)

    f = time_ms(fwd, st.device, warmup, iters)
    fb = time_ms(fwd_bwd, st.device, warmup, iters)
    s = st.shape
    return {"fwd_ms": f, "bwd_ms": fb - f, "fwd_tflops": tflops(s.forward_flops, f),
            "bwd_tflops": tflops(s.backward_flops, fb - f)}


def torch_gemm_times(st: Stages, warmup: int, iters: int) -> dict[str, float]:
    """torch._grouped_mm forward, dgrad and wgrad of the gate (= up) and down projections on the same
    routing (rows sorted by expert, no padding), through autograd as the PyTorch baseline runs them."""
    s = st.shape
    order = torch.argsort(st.topk_ids.reshape(-1), stable=True)
    offs = torch.bincount(st.topk_ids.reshape(-1), minlength=s.num_experts).cumsum(0).to(torch.int32)
    xs = st.x[order // s.top_k].detach().requires_grad_(True)
    wg = st.w_gate.detach().requires_grad_(True)
    hs = torch.randn(s.rows, s.intermediate, device=st.device).to(st.dtype).requires_grad_(True)
    wd = st.w_down.detach().requires_grad_(True)
    gate = torch._grouped_mm(xs, wg.transpose(-2, -1), offs=offs)
    y = torch._grouped_mm(hs, wd.transpose(-2, -1), offs=offs)
    d_gate, d_y = torch.randn_like(gate), torch.randn_like(y)
    dev = st.device
    times = {
        "gate_fwd": time_ms(lambda: torch._grouped_mm(xs, wg.transpose(-2, -1), offs=offs), dev, warmup, iters),
        "down_fwd": time_ms(lambda: torch._grouped_mm(hs, wd.transpose(-2, -1), offs=offs), dev, warmup, iters),
        "gate_dgrad": time_ms(lambda: torch.autograd.grad(gate, [xs], d_gate, retain_graph=True), dev, warmup, iters),
        "gate_wgrad": time_ms(lambda: torch.autograd.grad(gate, [wg], d_gate, retain_graph=True), dev, warmup, iters),
        "down_dgrad": time_ms(lambda: torch.autograd.grad(y, [hs], d_y, retain_graph=True), dev, warmup, iters),
        "down_wgrad": time_ms(lambda: torch.autograd.grad(y, [wd], d_y, retain_graph=True), dev, warmup, iters),
    }
    # The Triton stage each torch piece corresponds to (dx fuses the gate and up dgrads).
    times["as_stages"] = {"gate_up": 2 * times["gate_fwd"], "down_push": times["down_fwd"],
                          "dgrad_swiglu": times["down_dgrad"], "dx_push": 2 * times["gate_dgrad"],
                          "wgrad_gate": times["gate_wgrad"], "wgrad_up": times["gate_wgrad"],
                          "wgrad_down": times["down_wgrad"]}
    return times


class Budget:
    def __init__(self, seconds: float) -> None:
        self.start, self.seconds = time.monotonic(), seconds

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self.start)


def reduction_depth(kernel: str, shape: MoEShape) -> int | None:
    """The k a kernel's default configuration is chosen by (``_common.default_config``); None for the wgrad."""
    return {"gate_up_swiglu": shape.hidden, "down_forward": shape.intermediate, "down_dgrad_swiglu": shape.hidden,
            "dx_dgrad": 2 * shape.intermediate}.get(kernel)


def measure_candidates(st: Stages, kernel: str, configs: list[TileConfig], budget: Budget, args,
                       compile_log: dict) -> list[dict]:
    """Default first, then each candidate: compile (skip on failure or spills), compare, time."""
    rows = []
    st.run_all()  # inputs of every stage, as the default configurations leave them
    reference = {name: t.clone() for name, t in st.outputs(kernel).items()}
    stages = KERNEL_STAGES[kernel]
    default = _common.default_config(kernel, st.dtype, reduction_depth(kernel, st.shape))
    for index, cfg in enumerate([default] + [c for c in configs if c != default]):
        row = {"kernel": kernel, "config": dataclasses.asdict(cfg), "label": describe(cfg), "default": index == 0}
        rows.append(row)
        if index > 0 and budget.left() < 0:
            row["status"] = "skipped (time budget)"
            continue
        try:
            # The default runs as the pipeline runs it (no override): a bitwise check of determinism too.
            with override_configs({kernel: cfg}) if index > 0 else contextlib.nullcontext():
                before = compiled_kernels()
                st.poison(kernel)
                for stage in stages:
                    st.run(stage)
                if st.device.type == "cuda":
                    torch.cuda.synchronize(st.device)
                new = [k for key, k in compiled_kernels().items() if key not in before]
                key = (kernel, describe(cfg))
                if new:
                    compile_log[key] = compile_info(new)
                row.update(compile_log.get(key, {}))
                if index > 0 and (row.get("spills") or row.get("local_ops")):
                    row["status"] = (f"skipped (spills: {row.get('spills')} registers, {row.get('local_ops')} "
                                     f"LDL/STL)")
                    continue
                # relative_error is inf when an output holds a NaN: an element the candidate did not write
                errs = {name: relative_error(t, reference[name]) for name, t in st.outputs(kernel).items()}
                row["rel_err"] = max(errs.values())
                row["bitwise"] = all(bitwise_equal(t, reference[name]) for name, t in st.outputs(kernel).items())
                if not row["rel_err"] < REL_TOL:
                    row["status"] = f"WRONG (rel err {row['rel_err']:.2e}: {errs})"
                    continue
                row["ms"] = sum(time_ms(lambda: st.run(stage), st.device, args.warmup, args.iters)
                                for stage in stages)
                row["status"] = "ok"
        except Exception as err:  # noqa: BLE001 - a candidate that does not compile or run is skipped
            row["status"] = f"failed ({type(err).__name__}: {str(err).splitlines()[0][:100] if str(err) else ''})"
    base = rows[0].get("ms")
    flops = sum(stage_work(st.shape, stage)[0] for stage in stages)
    for row in rows:
        if row.get("ms"):
            row["tflops"] = tflops(flops, row["ms"])
            row["speedup"] = base / row["ms"] if base else None
    return rows


def measure_shape(shape: MoEShape, args, budget: Budget, compile_log: dict) -> dict:
    device = torch.device(args.device)
    result: dict = {"shape": dataclasses.asdict(shape)}
    st = Stages(shape, device)
    result["rows_used"] = st.used
    result["capacity"] = st.n

    # ---- 1. the whole layer --------------------------------------------------------------------------
    if not args.no_layer:
        for backend in ("triton", "torch"):
            try:
                result[f"layer_{backend}"] = layer_times(st, backend, args.warmup, args.iters)
            except Exception as err:  # noqa: BLE001
                result[f"layer_{backend}"] = {"error": f"{type(err).__name__}: {err}"}
    # ---- 2. each stage alone (default configurations) ------------------------------------------------
    st.run_all()
    stages = {}
    for stage in Stages.FORWARD + Stages.BACKWARD:
        ms = time_ms(lambda: st.run(stage), device, args.warmup, args.iters)
        flops, nbytes = stage_work(shape, stage)
        stages[stage] = {"ms": ms, "tflops": tflops(flops, ms) if flops else None,
                         "gbps": gbps(nbytes, ms) if nbytes else None}
    result["stages"] = stages
    # ---- 3. torch._grouped_mm pieces ---------------------------------------------------------------------
    if device.type == "cuda" and not args.no_torch:
        try:
            result["torch"] = torch_gemm_times(st, args.warmup, args.iters)
        except Exception as err:  # noqa: BLE001
            result["torch"] = {"error": f"{type(err).__name__}: {err}"}
    # ---- 4. candidates ---------------------------------------------------------------------------------
    result["candidates"] = {}
    for kernel in args.kernels:
        result["candidates"][kernel] = measure_candidates(st, kernel, CANDIDATES.get(kernel, []), budget, args,
                                                          compile_log)
    del st
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


# ========================================================================================================
# Parallel pre-compilation (worker processes fill Triton's disk cache)
# ========================================================================================================
# Tiny problems whose arguments specialise like the real shapes' (integers multiples of 16 and none equal to 1,
# 16 router-gradient partials as at I = 2048) and whose widths do not clamp any candidate's blocks: one like
# the anchors, one with top-k 1 and a table whose rows-in-use entry is not 16-byte aligned (kimi-k2.7/ep64), one
# with few rows per expert (the wgrad's strip kernel).
# Compiling needs no meaningful data: a task runs one kernel's stages on whatever the buffers hold.
_WARM_SHAPES = (MoEShape("warm-anchor", 256, 512, 2048, 4, 2), MoEShape("warm-top1", 256, 512, 2048, 2, 1),
                MoEShape("warm-few", 256, 512, 2048, 8, 1))
_WORKER: dict = {}


def _warm_init(device: str) -> None:
    _WORKER["stages"] = [Stages(s, torch.device(device)) for s in _WARM_SHAPES]


def _warm(task) -> str:
    """Compile one task: ``(kernel, config fields)`` runs that kernel's stages with the candidate, ``(None,
    stage)`` runs one stage with the default configurations."""
    kernel, what = task
    try:
        with override_configs({kernel: what}) if kernel else contextlib.nullcontext():
            for st in _WORKER["stages"]:
                for stage in KERNEL_STAGES[kernel] if kernel else (what,):
                    st.run(stage)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return "ok"
    except Exception as err:  # noqa: BLE001 - the main process meets the same error and reports it
        return f"{type(err).__name__}: {str(err).splitlines()[0][:80] if str(err) else ''}"


def precompile(kernels: list[str], jobs: int, device: str) -> str:
    """Compile the default configurations' stages and every candidate of ``kernels`` in ``jobs`` processes."""
    tasks = [(None, stage) for stage in Stages.FORWARD + Stages.BACKWARD]
    tasks += [(k, dataclasses.asdict(c)) for k in kernels for c in CANDIDATES.get(k, [])]
    t0 = time.monotonic()
    try:
        ctx = multiprocessing.get_context("spawn")
        with futures.ProcessPoolExecutor(max_workers=jobs, mp_context=ctx, initializer=_warm_init,
                                         initargs=(device,)) as pool:
            results = list(pool.map(_warm, tasks))
    except Exception as err:  # noqa: BLE001 - compiling in the main process instead is only slower
        return f"pre-compilation failed ({type(err).__name__}: {err}); compiling serially"
    failed = [f"{task[0] or task[1]}: {r}" for task, r in zip(tasks, results) if r != "ok"]
    return (f"pre-compiled {len(tasks)} tasks in {time.monotonic() - t0:.0f} s with {jobs} workers"
            + (f"; {len(failed)} failed: {'; '.join(failed)[:300]}" if failed else ""))


# ========================================================================================================
# Report
# ========================================================================================================
def _f(value, spec: str, width: int) -> str:
    return f"{value:{spec}}".rjust(width) if isinstance(value, (int, float)) else "-".rjust(width)


def print_shape(res: dict) -> list[str]:
    s = MoEShape(**res["shape"])
    lines = [f"== {s.name}: {s.describe()} (rows {s.rows}, table rows in use {res['rows_used']}) =="]
    for backend in ("triton", "torch"):
        lt = res.get(f"layer_{backend}")
        if lt and "error" not in lt:
            lines.append(f"layer {backend:6s} fwd {lt['fwd_ms']:7.3f} ms {lt['fwd_tflops']:6.1f} TF/s   "
                         f"bwd {lt['bwd_ms']:7.3f} ms {lt['bwd_tflops']:6.1f} TF/s")
        elif lt:
            lines.append(f"layer {backend:6s} {lt['error'][:100]}")
    torch_stages = (res.get("torch") or {}).get("as_stages", {})
    lines.append(f"{'stage':31s}{'ms':>8s}{'TF/s':>8s}{'GB/s':>8s}{'torch ms':>10s}{'torch TF/s':>11s}")
    totals = {"fwd": 0.0, "bwd": 0.0}
    for stage, row in res["stages"].items():
        totals["bwd" if stage in Stages.BACKWARD else "fwd"] += row["ms"]
        tms = torch_stages.get(stage)
        ttf = tflops(stage_work(s, stage)[0], tms) if tms else None
        lines.append(f"{STAGE_LABELS[stage]:31s}{_f(row['ms'], '.3f', 8)}{_f(row['tflops'], '.0f', 8)}"
                     f"{_f(row['gbps'], '.0f', 8)}{_f(tms, '.3f', 10)}{_f(ttf, '.0f', 11)}")
    lines.append(f"{'sum of fwd stages':31s}{totals['fwd']:8.3f}   |  sum of bwd stages {totals['bwd']:.3f} ms")
    for kernel, rows in res["candidates"].items():
        ok = [r for r in rows if r.get("ms")]
        base = rows[0]
        best = min(ok, key=lambda r: r["ms"]) if ok else None
        deterministic = {True: "repeat bitwise", False: "REPEAT NOT BITWISE", None: "-"}[base.get("bitwise")]
        lines.append(f"  {kernel:18s} default {_f(base.get('ms'), '.3f', 7)} ms ({deterministic})"
                     + (f" -> best {best['label']} {best['ms']:.3f} ms ({best['speedup']:.2f}x, "
                        f"{best['tflops']:.0f} TF/s)" if best else f": {base.get('status')}"))
    return lines


def candidate_matrix(results: list[dict]) -> list[str]:
    """Per kernel: every candidate's milliseconds on every shape, ranked by geometric-mean speed-up."""
    lines = []
    names = [r["shape"]["name"] for r in results]
    kernels = [k for k in CANDIDATES if any(k in r["candidates"] for r in results)]
    for kernel in kernels:
        by_label: dict[str, dict] = {}
        for res in results:
            for row in res["candidates"].get(kernel, []):
                by_label.setdefault(row["label"], {})[res["shape"]["name"]] = row
        lines.append(f"{kernel} (ms on {' | '.join(names)}; speed-up vs default)")

        def score(item):
            speedups = [r.get("speedup") for r in item[1].values()]
            return geomean(speedups) or 0.0
        for label, rows in sorted(by_label.items(), key=score, reverse=True):
            default = any(r["default"] for r in rows.values())
            cells = []
            for name in names:
                r = rows.get(name)
                if r is None:
                    cells.append("-".rjust(16))
                elif r.get("ms"):
                    bit = "" if r.get("bitwise") else "~"
                    cells.append(f"{r['ms']:7.3f} {r['speedup']:5.2f}x{bit:1s}".rjust(16))
                else:
                    cells.append(r.get("status", "?").split(" ")[0][:16].rjust(16))
            gm = score((label, rows))
            lines.append(f"  {'*' if default else ' '} {label:27s}{''.join(cells)}   {gm:5.3f}x" if gm else
                         f"  {'*' if default else ' '} {label:27s}{''.join(cells)}")
    lines.append("  (* the default; ~ not bitwise equal to the default; skipped/failed/WRONG: see the JSON rows)")
    return lines


def suggestions(results: list[dict]) -> list[str]:
    """Per kernel: the candidate to make the default, if one gains clearly and consistently: the best
    geometric-mean speed-up among candidates measured correct on every shape, at least 2%, with no shape more
    than 3% slower than the default. Otherwise keep the default."""
    lines = []
    for kernel in [k for k in CANDIDATES if any(k in r["candidates"] for r in results)]:
        by_label: dict[str, list] = {}
        for res in results:
            for row in res["candidates"].get(kernel, []):
                by_label.setdefault(row["label"], []).append(row)
        shapes = sum(kernel in r["candidates"] for r in results)
        scored = [(geomean(r["speedup"] for r in rows), min(r["speedup"] for r in rows), rows[0])
                  for rows in by_label.values()
                  if len(rows) == shapes and all(r.get("speedup") for r in rows) and not rows[0]["default"]]
        consistent = [item for item in scored if item[1] >= 0.97 and item[0] >= 1.02]
        if not consistent:
            best = max(scored, key=lambda x: x[0]) if scored else None
            lines.append(f"  {kernel:18s} keep the default" + (
                f" (best candidate {best[2]['label']}: geomean {best[0]:.3f}x, worst shape {best[1]:.3f}x)"
                if best else " (no candidate measured on every shape)"))
            continue
        gm, worst, row = max(consistent, key=lambda x: x[0])
        lines.append(f"  {kernel:18s} switch to {row['label']} (geomean {gm:.3f}x, worst shape {worst:.3f}x, "
                     f"bitwise {'same' if all(r.get('bitwise') for r in by_label[row['label']]) else 'different'})"
                     f":   {config_line(kernel, TileConfig(**row['config']))}")
    return lines


# ========================================================================================================
# Main
# ========================================================================================================
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma list of presets or T,H,I,E,K "
                        f"(';' between custom shapes); default {DEFAULT_SHAPES}")
    parser.add_argument("--kernels", default=",".join(CANDIDATES), help="kernels whose candidates to time "
                        f"(default all: {','.join(CANDIDATES)}; 'none' for stages only)")
    parser.add_argument("--budget", type=float, default=170.0, help="seconds after which remaining candidates "
                        "are skipped (stages and defaults are always measured)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--iters", type=int, default=7)
    parser.add_argument("--jobs", type=int, default=None,
                        help="worker processes that pre-compile the candidates (0: compile serially; default "
                             "half the CPU cores, at most 8, on a GPU, 0 on a CPU)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-layer", action="store_true", help="skip the whole-layer timings")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch._grouped_mm reference")
    parser.add_argument("--json", default=None, help="also write the JSON here")
    args = parser.parse_args(argv)
    args.kernels = [] if args.kernels == "none" else [k for k in args.kernels.split(",") if k]
    unknown = set(args.kernels) - set(CANDIDATES)
    if unknown:
        parser.error(f"unknown kernels {sorted(unknown)}; known: {sorted(CANDIDATES)}")
    separator = ";" if ";" in args.shapes else ","
    specs = args.shapes.split(separator) if separator == ";" else _split_shapes(args.shapes)
    shapes = [get_shape(spec) for spec in specs]

    budget = Budget(args.budget)
    t_start = time.monotonic()
    notes = []
    if args.jobs is None:
        args.jobs = min(8, max(1, (os.cpu_count() or 2) // 2)) if args.device == "cuda" else 0
    if args.jobs > 0 and args.kernels:
        notes.append(precompile(args.kernels, args.jobs, args.device))
        print(notes[-1], flush=True)
    results, compile_log = [], {}
    doc = {"schema": "mok.tune_triton/1", "metadata": collect_metadata(args.device), "args": vars(args),
           "defaults": {k: dataclasses.asdict(_common.default_config(k, torch.bfloat16)) for k in CANDIDATES},
           "short_k_defaults": {k: [deepest, dataclasses.asdict(cfg)]
                                for k, (deepest, cfg) in _common._GPU_BF16_SHORT_K.items()},
           "env_overrides": _common.active_overrides(), "results": results, "notes": notes}
    paths = [Path(p) for p in (args.json, os.environ.get("OUT") and Path(os.environ["OUT"]) / "tune_triton.json")
             if p]
    for shape in shapes:
        t0 = time.monotonic()
        try:
            results.append(measure_shape(shape, args, budget, compile_log))
        except Exception:  # noqa: BLE001 - report and go on with the next shape
            traceback.print_exc()
            notes.append(f"{shape.name}: failed (traceback above)")
        print(f"[{shape.name}: {time.monotonic() - t0:.0f} s]", flush=True)
        doc["elapsed_s"] = time.monotonic() - t_start
        for path in paths:  # after every shape: a run cut short still leaves its measurements
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=1, default=str))

    lines = [f"# tune_triton: {doc['metadata'].get('gpu') or args.device}, triton {doc['metadata'].get('triton')}, "
             f"torch {doc['metadata'].get('torch')}, {doc['elapsed_s']:.0f} s"]
    for res in results:
        lines += print_shape(res)
    lines.append("== candidates ==")
    lines += candidate_matrix(results)
    lines.append("== suggested defaults (mok/triton_ref/_common.py, _GPU_BF16) ==")
    lines += suggestions(results) or ["  (no candidates measured)"]
    lines += [f"note: {n}" for n in notes]
    print("\n".join(lines))
    return 0


def _split_shapes(spec: str) -> list[str]:
    """Comma-separated presets; a custom 'T,H,I,E,K' shape must be given alone or with ';' separators."""
    try:
        get_shape(spec)
        return [spec]
    except ValueError:
        return [s for s in spec.split(",") if s]


if __name__ == "__main__":
    sys.exit(main())
