"""``backend="cuda"``: the SM90 megakernel forward, the Triton pipeline backward.

Forward. One persistent kernel (mok/cuda/include/mok/sm90_moe_forward.cuh) runs dispatch, the gate/up GEMM
with SwiGLU, the down GEMM with push-combine, and the fixed-order weighted sum for all ``ep_size`` emulated
ranks. Everything it reads is prepared here on the device, without a host synchronisation of our own:

* the schedule table (:func:`mok.schedule.build_schedule`, worst-case capacity by default);
* peer pointer tables (:class:`mok.comm.PeerBuffer`): rank r's token buffer, router weights, combine slots
  and output, as base addresses computed on the device (no host round trip, so the launch can be captured
  in a CUDA graph once its inputs are prepared);
* the ring (``ring_x`` [R * ring_rows, H] and ``ring_h`` [R * ring_rows, I], bf16), the counters and the
  error record, all reset by the kernel's own in-stream reset.

Backward. There is no backward megakernel yet: :class:`CudaMoE` recomputes the layer through the Triton
backend under autograd (``torch.enable_grad`` + ``torch.autograd.grad``) and returns its gradients, so
training works end to end today at the cost of a second forward in the backward.

Variants (``variant=`` or ``MOK_CUDA_VARIANT``): ``"simple"`` (lock-step roles, the baseline) and
``"pipelined"`` (producer runs ahead, overlapped wgmma). Both compute the same bits.

Environment: ``MOK_CUDA_VARIANT`` (default ``simple``), ``MOK_CUDA_CHECK`` (default 1: read the kernel's
error record after each forward, which synchronises; set 0 in tuned loops, and it is skipped while a CUDA
graph is being captured), ``MOK_CUDA_TIMEOUT_S`` (default 10: bound of every in-kernel wait).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..backends import Backend, get_backend, register_backend
from ..backends.reference import choose_minibatch_rows
from ..comm import PeerBuffer
from ..config import MoKConfig
from ..schedule import Schedule, build_schedule
from .build import load_extension

VARIANTS = {"simple": 0, "pipelined": 1}
BLOCK_M = 128                 # the kernel's tile height: MoKConfig.expert_padding must equal it
DEFAULT_RING_MINIBATCHES = 4  # ring size when MoKConfig.ring_rows is None (the ring never changes results)

ERROR_CODES = {1: "a bounded wait timed out", 2: "the schedule table is inconsistent",
               3: "shared memory is misaligned"}
COUNTER_NAMES = {0: "-", 1: "dispatch_done[rank][tile]", 2: "gate_up_tile_done[rank][tile]",
                 3: "gate_up_mb_done[rank][minibatch]", 4: "down_mb_done[rank][minibatch]",
                 5: "pushed[source rank]", 6: "stage full mbarrier", 7: "stage empty mbarrier",
                 8: "task queue full mbarrier", 9: "task queue empty mbarrier"}


class Sm90KernelError(RuntimeError):
    """The megakernel recorded an error (its error record, decoded)."""


def describe_error(words: list[int]) -> str:
    """Human-readable form of the kernel's error record (see workspace.cuh, ErrorWord)."""
    code, counter, rank, index, seen, expected, block, ticket = (list(words) + [0] * 8)[:8]
    what = ERROR_CODES.get(code, f"error code {code}")
    return (f"{what}: counter={COUNTER_NAMES.get(counter, counter)} rank={rank} index={index} seen={seen} "
            f"expected={expected} (CTA {block}, ticket {ticket})")


def default_variant() -> str:
    return os.environ.get("MOK_CUDA_VARIANT", "simple")


def emulated_peer_buffer(name: str, stacked: torch.Tensor) -> PeerBuffer:
    """A :class:`PeerBuffer` over ``stacked`` [R, ...]: rank r's buffer is ``stacked[r]``.

    The pointer table is computed on the device (base + r * stride), so building it never waits for the GPU.
    """
    ranks = stacked.shape[0]
    step = stacked.stride(0) * stacked.element_size()
    table = torch.arange(ranks, dtype=torch.int64, device=stacked.device) * step + stacked.data_ptr()
    return PeerBuffer(name, tuple(stacked.shape[1:]), stacked.dtype, list(stacked.unbind(0)), table)


@dataclass
class Sm90Launch:
    """Everything one launch reads and writes (tensor shapes: R ranks, T_local tokens per rank, K top-k).

    Attributes:
        schedule: the schedule tables of all R ranks.
        tokens_per_rank, top_k, minibatch_rows, ring_rows: sizes (host ints).
        x_buf: bf16 [T_local, H] per rank: the tokens (a view of the caller's x).
        weight_buf: fp32 [T_local * K] per rank: router weights.
        combine_buf: bf16 [T_local * K, H] per rank: combine slots (written by the down epilogue).
        out_buf: bf16 [T_local, H] per rank: views of ``out``.
        out: bf16 [T, H], the layer output.
        w_gate, w_up: bf16 [E, I, H]; w_down: bf16 [E, H, I] (contiguous).
        ring_x: bf16 [R * ring_rows, H]; ring_h: bf16 [R * ring_rows, I].
        counters: int32 device counters; error: int32 [8] error record.
    """

    schedule: Schedule
    tokens_per_rank: int
    top_k: int
    minibatch_rows: int
    ring_rows: int
    x_buf: PeerBuffer
    weight_buf: PeerBuffer
    combine_buf: PeerBuffer
    out_buf: PeerBuffer
    out: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor
    ring_x: torch.Tensor
    ring_h: torch.Tensor
    counters: torch.Tensor
    error: torch.Tensor


def ring_rows_for(config: MoKConfig, capacity: int, minibatch_rows: int) -> int:
    """``config.ring_rows``, or DEFAULT_RING_MINIBATCHES minibatches (fewer if the schedule is smaller)."""
    if config.ring_rows is not None:
        if config.ring_rows % minibatch_rows:
            raise ValueError(f"MoKConfig.ring_rows ({config.ring_rows}) must be a multiple of the minibatch "
                             f"size ({minibatch_rows} rows)")
        return config.ring_rows
    minibatches = -(-capacity // minibatch_rows)
    return min(minibatches, DEFAULT_RING_MINIBATCHES) * minibatch_rows


def prepare(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate: torch.Tensor,
            w_up: torch.Tensor, w_down: torch.Tensor, *, ep_size: int = 1, config: MoKConfig | None = None,
            poison: bool = False) -> Sm90Launch:
    """Build the schedule, pointer tables, ring and counters for one launch (no launch yet).

    Args:
        x: [T, H] bf16 tokens; T divisible by ``ep_size``.
        topk_ids: [T, K] int expert ids; topk_weights: [T, K] router weights (any float dtype; used as fp32).
        w_gate, w_up: [E, I, H] bf16; w_down: [E, H, I] bf16.
        poison: fill the output, the combine slots and the ring with NaN first (tests: an element the kernel
            fails to write, or a stale value it reads, shows up as NaN).
    """
    config = config or MoKConfig()
    if config.expert_padding != BLOCK_M:
        raise ValueError(f"backend 'cuda' needs MoKConfig.expert_padding == {BLOCK_M} (its tile height), "
                         f"got {config.expert_padding}")
    if x.dtype != torch.bfloat16:
        raise TypeError(f"backend 'cuda' runs bf16 only, got x of dtype {x.dtype}")
    tokens, hidden = x.shape
    num_experts, intermediate, _ = w_gate.shape
    top_k = topk_ids.shape[1]
    if tokens % ep_size or num_experts % ep_size:
        raise ValueError(f"tokens ({tokens}) and experts ({num_experts}) must be divisible by ep_size ({ep_size})")
    tokens_per_rank = tokens // ep_size
    for name, size in (("hidden size H", hidden), ("intermediate size I", intermediate)):
        if size % 64:
            raise ValueError(f"backend 'cuda' needs the {name} to be a multiple of 64, got {size}")

    schedule = build_schedule(topk_ids, num_experts, ep_size, BLOCK_M, config.capacity_rows)
    minibatch_rows = choose_minibatch_rows(x, num_experts, top_k, intermediate, ep_size, config)
    ring_rows = ring_rows_for(config, schedule.capacity, minibatch_rows)

    device = x.device
    fill = float("nan") if poison else None

    def alloc(*shape, dtype=torch.bfloat16):
        t = torch.empty(shape, dtype=dtype, device=device)
        return t.fill_(fill) if fill is not None else t

    x = x.contiguous()
    weights = topk_weights.detach().float().contiguous()
    out = alloc(tokens, hidden)
    combine = alloc(ep_size, tokens_per_rank * top_k, hidden)
    ext = load_extension()
    counters = torch.empty(ext.counter_ints(ep_size, schedule.capacity, minibatch_rows), dtype=torch.int32,
                           device=device)
    return Sm90Launch(
        schedule=schedule, tokens_per_rank=tokens_per_rank, top_k=top_k, minibatch_rows=minibatch_rows,
        ring_rows=ring_rows,
        x_buf=emulated_peer_buffer("x", x.detach().view(ep_size, tokens_per_rank, hidden)),
        weight_buf=emulated_peer_buffer("topk_weights", weights.view(ep_size, tokens_per_rank * top_k)),
        combine_buf=emulated_peer_buffer("combine_slots", combine),
        out_buf=emulated_peer_buffer("out", out.view(ep_size, tokens_per_rank, hidden)),
        out=out,
        w_gate=w_gate.detach().contiguous(), w_up=w_up.detach().contiguous(), w_down=w_down.detach().contiguous(),
        ring_x=alloc(ep_size * ring_rows, hidden), ring_h=alloc(ep_size * ring_rows, intermediate),
        counters=counters, error=torch.zeros(ext.error_words(), dtype=torch.int32, device=device))


def launch(prep: Sm90Launch, *, variant: str | None = None, num_ctas: int = 0,
           timeout_s: float | None = None) -> torch.Tensor:
    """Enqueue the reset and the megakernel on the current stream; returns ``prep.out`` (not yet ready).

    Never synchronises, so it can be captured in a CUDA graph. ``num_ctas`` = 0 launches one CTA per SM;
    fewer is allowed (the static task order cannot deadlock), which tests use.
    """
    variant = variant or default_variant()
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {variant!r}")
    timeout_s = float(os.environ.get("MOK_CUDA_TIMEOUT_S", "10")) if timeout_s is None else timeout_s
    s = prep.schedule
    load_extension().forward(
        s.src_rank, s.src_slot, s.tile_expert, s.segment_offsets,
        prep.x_buf.ptr_table, prep.weight_buf.ptr_table, prep.combine_buf.ptr_table, prep.out_buf.ptr_table,
        prep.w_gate, prep.w_up, prep.w_down, prep.ring_x, prep.ring_h, prep.counters, prep.error,
        prep.tokens_per_rank, prep.top_k, prep.minibatch_rows, VARIANTS[variant], num_ctas, timeout_s)
    return prep.out


def check_error(prep: Sm90Launch) -> None:
    """Raise :class:`Sm90KernelError` if the launch recorded an error (synchronises with the device)."""
    words = prep.error.tolist()
    if words[0] != 0:
        raise Sm90KernelError(f"mok SM90 MoE forward: {describe_error(words)}")


def _checking_enabled(check: bool | None) -> bool:
    if check is None:
        check = os.environ.get("MOK_CUDA_CHECK", "1") not in ("0", "", "false", "False")
    return check and not torch.cuda.is_current_stream_capturing()


def sm90_forward(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1,
                 config: MoKConfig | None = None, variant: str | None = None, num_ctas: int = 0,
                 check: bool | None = None, poison: bool = False) -> torch.Tensor:
    """The layer forward through the megakernel (no autograd). Returns ``out`` [T, H] bf16.

    Shapes as in :func:`mok.moe`. ``check`` (default: ``MOK_CUDA_CHECK``, on) reads the kernel's error record
    and raises :class:`Sm90KernelError`; ``poison`` NaN-fills outputs and intermediates before the launch.
    """
    prep = prepare(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size=ep_size, config=config, poison=poison)
    out = launch(prep, variant=variant, num_ctas=num_ctas)
    if _checking_enabled(check):
        check_error(prep)
    return out


class CudaMoE(torch.autograd.Function):
    """Megakernel forward; backward by recomputing through the Triton backend under autograd."""

    @staticmethod
    def forward(ctx, x, topk_weights, w_gate, w_up, w_down, topk_ids, ep_size, config, variant):
        out = sm90_forward(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size=ep_size, config=config,
                           variant=variant)
        ctx.save_for_backward(x, topk_weights, w_gate, w_up, w_down, topk_ids)
        ctx.ep_size = ep_size
        ctx.config = config
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        x, topk_weights, w_gate, w_up, w_down, topk_ids = ctx.saved_tensors
        needs = ctx.needs_input_grad[:5]
        if not any(needs):
            return (None,) * 9
        try:
            triton_backend = get_backend("triton")
        except (RuntimeError, ValueError) as err:
            raise RuntimeError("backend 'cuda' computes its backward through the Triton backend, which is "
                               f"unavailable: {err}") from err
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(need) for t, need in zip((x, topk_weights, w_gate, w_up, w_down), needs)]
            out = triton_backend.run(leaves[0], topk_ids, leaves[1], leaves[2], leaves[3], leaves[4],
                                     ep_size=ctx.ep_size, precision="bf16", config=ctx.config)
            wanted = [t for t in leaves if t.requires_grad]
            grads = iter(torch.autograd.grad(out, wanted, grad_out, allow_unused=True))
        result = [next(grads) if need else None for need in needs]
        return (*result, None, None, None, None)


def cuda_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1, precision: str = "bf16",
             config: MoKConfig | None = None, variant: str | None = None) -> torch.Tensor:
    """``mok.moe(..., backend="cuda")``: see the module docstring. bf16 only."""
    if precision != "bf16":
        raise ValueError(f"backend 'cuda' supports precision='bf16' only, got {precision!r}")
    if not x.is_cuda:
        raise ValueError("backend 'cuda' needs CUDA tensors (a Hopper GPU)")
    return CudaMoE.apply(x, topk_weights, w_gate, w_up, w_down, topk_ids, ep_size, config or MoKConfig(),
                         variant or default_variant())


register_backend(Backend("cuda", cuda_moe, ("bf16",),
                         "SM90 persistent megakernel forward (mok/cuda); Triton pipeline backward"))
