"""torchrun entry points for expert parallelism across processes: ``validate`` and ``bench``.

::

    torchrun --nproc-per-node N -m mok.dist_cli validate [--shape tiny] [--dtype bf16] [--transport collective,peers]
    torchrun --nproc-per-node N -m mok.dist_cli bench [--models kimi-k2.7,...] [--tokens-per-gpu 2048]

Both run with ``--nproc-per-node 1`` on one GPU, and on CPUs with gloo (``--device cpu``); without torchrun
(plain ``python -m mok.dist_cli ...``) they run as a one-process group. NVLink multicast is switched off in
the environment before the process group starts (see :mod:`mok.comm.symm_mem`).

``validate``: every rank builds the same global problem from ``--seed``, takes its tokens and experts, runs
:func:`mok.distributed.distributed_moe` forward and backward, and gathers the output and all five gradients.
Rank 0 compares them with the single-process reference at ``ep_size=world`` and ``ep_size=1`` (bitwise) and
with the fp64 oracle (relative error, :data:`mok.validate.TOLERANCE`), prints a table, writes JSON with a
SHA-256 fingerprint of every tensor's bits (so runs on 1, 2, 4 and 8 GPUs can be compared file to file) and
exits non-zero on any failure.

``bench``: per model at ``--tokens-per-gpu`` tokens and E/world experts per GPU: layer forward and backward
time for each backend (the NCCL all-to-all baseline included); push vs pull across processes with the
:mod:`mok.triton_ref.push_pull` kernels (each GPU launches its own rank's programs; rows, arrival counters and
ready flags live in symmetric memory): the bandwidth of the four transfers (pull and push, dispatch and combine,
uniform and Zipf routing) with and without their in-kernel completion signal, the signalling latency alone, and
NCCL all-to-all for the same rows; one symmetric-memory barrier's latency. Rank 0 writes JSON and Markdown
tables with the machine kind and GPU count.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import socket
import sys
import time
from pathlib import Path

from .comm.symm_mem import MULTICAST_OFF  # noqa: F401  (sets the multicast-off environment first)

import torch
import torch.distributed as dist

DEFAULT_RESULTS = Path("experiments/results/multi_gpu")


# --------------------------------------------------------------------------------------------------------
# Process group
# --------------------------------------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (for the tests' multi-process rendezvous; another process can take
    it before the group binds it, so a one-process group does not use one: :func:`init_distributed`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed(device: str | None = None) -> tuple[int, int, torch.device]:
    """Start (or join) the default process group: NCCL on GPUs, gloo on CPUs.

    Under torchrun the environment names rank and world; without it this is a one-process group whose
    rendezvous is an in-process store (no TCP port: a port found free can be taken by another process before
    the group listens on it, round 24's EADDRINUSE). Returns ``(rank, world_size, device)``; on GPUs ``device``
    is ``cuda:LOCAL_RANK``."""
    use_cuda = (device or ("cuda" if torch.cuda.is_available() else "cpu")).startswith("cuda")
    if not use_cuda:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton transfer kernels run on CPU tensors
    one_process = "RANK" not in os.environ
    if one_process:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    if use_cuda:
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if not dist.is_initialized():
        rendezvous = dict(store=dist.HashStore(), rank=0, world_size=1) if one_process else {}
        if use_cuda:
            dist.init_process_group("nccl", device_id=dev, **rendezvous)
        else:
            dist.init_process_group("gloo", **rendezvous)
    return dist.get_rank(), dist.get_world_size(), dev


def all_gather_rows(t: torch.Tensor, group=None) -> torch.Tensor:
    """Concatenate every rank's ``t`` along dim 0 (equal shapes), bit for bit (rows travel as bytes)."""
    from .distributed import _rows_as_bytes

    t = t.detach().contiguous()
    world = dist.get_world_size(group)
    parts = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather([_rows_as_bytes(p) for p in parts], _rows_as_bytes(t), group=group)
    return torch.cat(parts)


def machine_description(world: int, device: torch.device) -> dict:
    """What the results ran on: machine kind (``MOK_MACHINE_KIND`` if set), GPU name and count, versions, and the
    code (commit: ``MOK_GIT_COMMIT`` on a machine without the history; digest of the package's sources)."""
    from .bench.harness import collect_metadata

    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    code = collect_metadata("cpu")  # only the code fields are kept (the device is described here)
    return {"machine_kind": os.environ.get("MOK_MACHINE_KIND", f"{name} x{world}"), "gpu_count": world,
            "device": name, "torch": torch.__version__, "triton": code.get("triton"),
            "git_commit": code.get("git_commit"), "source_digest": code.get("source_digest"),
            "multicast_env": {k: os.environ.get(k) for k in MULTICAST_OFF},
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


# --------------------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------------------

def split_problem(problem: list[torch.Tensor], rank: int, world: int) -> list[torch.Tensor]:
    """This rank's share of a global problem ``[x, ids, w, w_gate, w_up, w_down]``: tokens
    ``[r*T/R, (r+1)*T/R)`` and experts ``[r*E/R, (r+1)*E/R)``."""
    x, ids, w, wg, wu, wd = problem
    tl, el = x.shape[0] // world, wg.shape[0] // world
    tok, exp = slice(rank * tl, (rank + 1) * tl), slice(rank * el, (rank + 1) * el)
    return [x[tok], ids[tok], w[tok], wg[exp], wu[exp], wd[exp]]


def run_distributed(problem: list[torch.Tensor], *, group=None, backend: str = "reference",
                    transport: str | None = None, config=None, grad_seed: int = 1) -> list[torch.Tensor]:
    """Forward and backward of this rank's share through :func:`distributed_moe`, then gathered:
    ``[out, dx, d_topk_weights, d_w_gate, d_w_up, d_w_down]`` for the whole problem, on every rank.

    The output gradient is the one :func:`mok.validate.forward_backward` uses (``randn`` seeded by
    ``grad_seed`` over the global output), so results compare bit for bit with the single-process run."""
    from .distributed import distributed_moe

    rank, world = dist.get_rank(group), dist.get_world_size(group)
    x, ids, w, wg, wu, wd = (p.detach().clone() for p in split_problem(problem, rank, world))
    leaves = [x, w, wg, wu, wd]
    for leaf in leaves:
        leaf.requires_grad_(True)
    out = distributed_moe(x, ids, w, wg, wu, wd, group=group, num_experts=problem[3].shape[0], backend=backend,
                          transport=transport, config=config)
    tokens, hidden = problem[0].shape
    grad = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(grad_seed))
    tl = tokens // world
    out.backward(grad.to(device=out.device, dtype=out.dtype)[rank * tl:(rank + 1) * tl])
    return [all_gather_rows(t, group) for t in [out, *(leaf.grad for leaf in leaves)]]


def fingerprint(tensors: list[torch.Tensor]) -> str:
    """SHA-256 over the raw bytes of each tensor, in order (equal fingerprints: equal bits)."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def planned_runs(backends: str, transports: str) -> tuple[list[tuple[str, str | None]], dict[str, str]]:
    """The ``(backend, transport)`` runs of ``validate --backend backends --transport transports`` (comma-separated;
    transport ``None`` for ``nccl``, which has its own), and why each other pair or backend is skipped (a backend
    unavailable here, a transport it does not take). The same answer on every rank, in the order given."""
    from .distributed import _rank_run_class

    planned: list[tuple[str, str | None]] = []
    skipped: dict[str, str] = {}
    for backend in backends.split(","):
        if backend == "nccl":
            planned.append((backend, None))
            continue
        try:
            supported = _rank_run_class(backend).TRANSPORTS
        except (RuntimeError, ValueError) as err:
            skipped[backend] = str(err)
            continue
        for transport in transports.split(","):
            if transport in supported:
                planned.append((backend, transport))
            else:
                skipped[f"{backend}/{transport}"] = (f"backend {backend!r} supports the transports "
                                                     f"{', '.join(supported)}")
    return planned, skipped


def _validate(args: argparse.Namespace) -> int:
    from .config import MoKConfig, get_shape
    from .validate import (DTYPES, OUTPUTS, TOLERANCE, bitwise_equal, default_tile, forward_backward,
                           random_problem, relative_error)

    rank, world, device = init_distributed(args.device)
    shape = get_shape(args.shape)
    if args.tokens:
        shape = shape.with_tokens(args.tokens)
    if shape.tokens % world or shape.num_experts % world:
        raise SystemExit(f"shape {shape.describe()}: tokens and experts must be divisible by the {world} ranks")
    tile = args.tile or default_tile(shape)
    config = MoKConfig(expert_padding=tile, minibatch_rows=args.minibatch, ring_rows=args.ring)
    problem = random_problem(shape, DTYPES[args.dtype], device, seed=args.seed, skew=args.skew)

    runs: dict[str, tuple[str, list[torch.Tensor]]] = {}
    planned, skipped = planned_runs(args.backend, args.transport)
    for backend, transport in planned:
        name = backend if transport is None else f"{backend}/{transport}"
        runs[name] = (backend, run_distributed(problem, backend=backend, transport=transport, config=config,
                                               grad_seed=args.seed + 1))

    failed = 0
    if rank == 0:
        # The single-process runs of each backend: what its distributed run must reproduce bit for bit.
        single: dict[tuple[str, int], list[torch.Tensor]] = {}
        for backend in sorted({backend for backend, _ in runs.values() if backend != "nccl"}):
            for ep in sorted({1, world}):
                single[backend, ep] = forward_backward(backend, problem, ep_size=ep, config=config,
                                                       grad_seed=args.seed + 1)
        oracle = forward_backward("oracle", problem, grad_seed=args.seed + 1)
        tolerance = TOLERANCE[args.dtype]  # --dtype names the precision
        record = {**machine_description(world, device), "command": "validate", "shape": shape.describe(),
                  "dtype": args.dtype, "tile": tile, "minibatch_rows": args.minibatch, "ring_rows": args.ring,
                  "seed": args.seed, "skew": args.skew, "tolerance": tolerance, "runs": {},
                  "fingerprints": {f"{backend} ep_size=1 (single process)": fingerprint(single[backend, 1])
                                   for backend, ep in single if ep == 1}}
        lines = [f"{world} rank(s) on {device.type}: shape {shape.describe()} dtype {args.dtype} tile {tile}",
                 f"{'run':<24}{'check':<34}" + "".join(f"{n:>15}" for n in OUTPUTS)]
        for name, (backend, got) in runs.items():
            errors = [relative_error(g, o) for g, o in zip(got, oracle)]
            entry = {"errors_vs_fp64_oracle": dict(zip(OUTPUTS, errors)), "fingerprint": fingerprint(got)}
            ok = all(e <= tolerance for e in errors)
            lines.append(f"{name:<24}{'rel. error vs fp64 oracle':<34}" + "".join(f"{e:>15.2e}" for e in errors))
            if backend != "nccl":  # the baseline is not bitwise reproducible by design
                checks = [(f"bitwise vs 1-process EP {ep}", single[backend, ep]) for ep in sorted({world, 1},
                                                                                               reverse=True)]
                for label, want in checks:
                    same = [bitwise_equal(g, w) for g, w in zip(got, want)]
                    entry[label] = dict(zip(OUTPUTS, same))
                    ok &= all(same)
                    cells = "".join(f"{'same' if s else 'DIFFERENT':>15}" for s in same)
                    lines.append(f"{name:<24}{label:<34}" + cells)
            entry["passed"] = ok
            record["runs"][name] = entry
            failed += not ok
        record["skipped"] = skipped
        lines += [f"skipped backend {name}: {why}" for name, why in skipped.items()]
        lines.append(("PASS" if not failed else f"FAIL ({failed} run(s))")
                     + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
        print("\n".join(lines), flush=True)
        out = Path(args.out or DEFAULT_RESULTS / f"validate_{device.type}_{world}rank.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(record, indent=2))
        print(f"wrote {out}")
    verdict = torch.tensor([failed], dtype=torch.int64, device=device)
    dist.broadcast(verdict, src=0)
    return 1 if int(verdict) else 0


# --------------------------------------------------------------------------------------------------------
# bench
# --------------------------------------------------------------------------------------------------------

def _model_specs(models: str):
    """Comma-separated names from :data:`mok.config.MODELS`, or one custom model as ``H,I,E,K``."""
    from .config import MODELS, ModelSpec

    if models.count(",") == 3 and models.replace(",", "").isdigit():
        h, i, e, k = (int(v) for v in models.split(","))
        return [ModelSpec(f"custom-{h}x{i}x{e}x{k}", e, h, i, k)]
    unknown = [name for name in models.split(",") if name not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}: choose from {sorted(MODELS)} or give one 'H,I,E,K'")
    return [MODELS[name] for name in models.split(",")]


def _slowest(ms: float, device: torch.device, group=None) -> float:
    slowest = torch.tensor([ms], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return float(slowest)


def _elapsed_ms(run, device: torch.device) -> float:
    """Milliseconds ``run()`` takes: CUDA events around it on a GPU (waiting for its work), wall time on a CPU."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    run()
    return (time.perf_counter() - t0) * 1e3


def _start_together(device: torch.device, group=None) -> None:
    """Wait for this rank's queued work, then for every rank."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier(group=group)


def _timed(fn, *, iters: int, warmup: int, device: torch.device, group=None) -> float:
    """Milliseconds per call of ``fn`` run back to back (for short transfers): the slowest rank's mean over
    ``iters`` calls after ``warmup``."""
    for _ in range(warmup):
        fn()
    _start_together(device, group)

    def back_to_back():
        for _ in range(iters):
            fn()

    return _slowest(_elapsed_ms(back_to_back, device) / iters, device, group)


def _timed_each(fn, setup=None, *, iters: int, warmup: int, device: torch.device, group=None) -> float:
    """Milliseconds of ``fn(setup())``, timing only ``fn``, every call started together on all ranks (for a
    layer's forward or backward, whose backward needs a fresh forward each time): slowest rank's mean."""
    total = 0.0
    for i in range(warmup + iters):
        arg = setup() if setup is not None else None
        _start_together(device, group)
        ms = _elapsed_ms(lambda: fn(arg), device)
        total += ms if i >= warmup else 0.0
    return _slowest(total / iters, device, group)


def _routing(tokens: int, num_experts: int, top_k: int, kind: str, seed: int, device: torch.device):
    """``(topk_weights fp32, topk_ids int32)`` for ``tokens`` tokens: ``"uniform"`` (random logits) or
    ``"zipf"`` (expert e drawn with probability ~ 1/(e+1), without replacement: low ids, hence low ranks,
    are hot)."""
    from .routing import route

    gen = torch.Generator().manual_seed(seed)
    if kind == "uniform":
        return route(torch.randn(tokens, num_experts, generator=gen).to(device), top_k)
    if kind != "zipf":
        raise ValueError(f"routing must be 'uniform' or 'zipf', got {kind!r}")
    probs = 1.0 / torch.arange(1, num_experts + 1, dtype=torch.float64)
    ids = torch.multinomial(probs.expand(tokens, -1), top_k, replacement=False, generator=gen)
    weights = torch.softmax(torch.randn(tokens, top_k, generator=gen), dim=1)
    return weights.float().to(device), ids.to(torch.int32).to(device)


def _weight_bytes(spec, world: int, backend: str) -> int:
    """Bytes one GPU needs for its experts' weights and gradients (activations are small beside them):
    bf16 weights and gradients, plus, for the reference, fp32 weight copies and fp32 gradient accumulators."""
    per_gpu = 3 * spec.hidden * spec.intermediate * (spec.num_experts // world)
    return per_gpu * (2 + 2 + (8 if backend == "reference" else 0))


def layer_inputs(spec, tokens: int, routing: str, tile: int, rank: int, world: int, device: torch.device) -> dict:
    """One rank's inputs of a model's layer at ``tokens`` tokens per GPU (E/world experts here): ``x``, routing
    ``weights`` and ``ids`` (``routing``: uniform or zipf), expert weights ``wg``, ``wu``, ``wd``, an output
    gradient ``grad`` and the ``config`` (expert padding ``tile``). The leaves require gradients."""
    from .config import MoKConfig

    local_experts = spec.num_experts // world
    # Drawn on the device: the host would take minutes for the 17 GB of kimi-k2.7 weights per GPU at EP 2.
    gen = torch.Generator(device=device).manual_seed(1000 + rank)
    dtype = torch.bfloat16
    x = torch.randn(tokens, spec.hidden, generator=gen, device=device).to(dtype).requires_grad_(True)
    weights, ids = _routing(tokens, spec.num_experts, spec.top_k, routing, 2000 + rank, device)
    weights.requires_grad_(True)

    def param(*size, fan_in):
        return (torch.randn(*size, generator=gen, device=device) * fan_in ** -0.5).to(dtype).requires_grad_(True)

    wg = param(local_experts, spec.intermediate, spec.hidden, fan_in=spec.hidden)
    wu = param(local_experts, spec.intermediate, spec.hidden, fan_in=spec.hidden)
    wd = param(local_experts, spec.hidden, spec.intermediate, fan_in=spec.intermediate)
    grad = torch.randn(tokens, spec.hidden, generator=gen, device=device).to(dtype)
    return dict(x=x, weights=weights, ids=ids, wg=wg, wu=wu, wd=wd, grad=grad,
                config=MoKConfig(expert_padding=tile))


def layer_calls(spec, inputs: dict, backend: str):
    """``(forward, backward)``: the distributed layer on ``inputs`` (:func:`layer_inputs`), and its backward from a
    forward's output. The backward returns the gradients (``torch.autograd.grad``) instead of accumulating them into
    ``.grad``: from the second call on, accumulating would add a read-add-write of every weight gradient (17 GB per
    GPU for kimi-k2.7 at EP 2, more than the layer's own traffic at 2,048 tokens per GPU) to what is timed. The
    single-GPU bench does the same (:meth:`mok.bench.problems.LayerProblem.backward`)."""
    from .distributed import distributed_moe

    i = inputs
    leaves = (i["x"], i["weights"], i["wg"], i["wu"], i["wd"])

    def forward(_=None):
        return distributed_moe(i["x"], i["ids"], i["weights"], i["wg"], i["wu"], i["wd"],
                               num_experts=spec.num_experts, backend=backend, config=i["config"],
                               check_inputs=False)

    def backward(out):
        return torch.autograd.grad(out, leaves, i["grad"])

    return forward, backward


def _layer_case(spec, args, rank: int, world: int, device: torch.device, backend: str) -> dict:
    """Forward and forward+backward time of one backend on one model (E/world experts per GPU)."""
    tokens = args.tokens_per_gpu
    inputs = layer_inputs(spec, tokens, args.routing, args.tile, rank, world, device)
    forward, backward = layer_calls(spec, inputs, backend)

    fwd = _timed_each(forward, iters=args.iters, warmup=args.warmup, device=device)
    bwd = _timed_each(backward, forward, iters=args.iters, warmup=args.warmup, device=device)
    per_gpu = spec.layer(tokens)  # this GPU's tokens (its share of the FLOPs)
    return {"forward_ms": fwd, "backward_ms": bwd, "forward_tflops": per_gpu.forward_flops / fwd / 1e9,
            "backward_tflops": per_gpu.backward_flops / bwd / 1e9}


TRANSFERS = ("pull_dispatch", "push_dispatch", "push_combine", "pull_combine")  # MoK's pair: pull dispatch,
# push combine; the other two are the opposite choice, with everything else equal.


def _transfer_case(spec, args, rank: int, world: int, device: torch.device, routing: str, peers) -> dict:
    """Push vs pull across processes with the kernels of :mod:`mok.triton_ref.push_pull` (each process launches
    only its own rank's programs; peers' rows, counters and flags are reached through symmetric memory), beside
    NCCL ``all_to_all_single`` moving the same rows.

    For each of :data:`TRANSFERS`, three variants:

    * ``data+signal`` (the headline): the rows and the in-kernel completion signal (push: arrival counters the
      receiver waits on; pull: "buffer ready" flags the readers wait on), so a call is complete when every
      rank's launch returns. Checked once, before timing, against the torch semantics (``bitwise_ok``).
    * ``data``: the rows alone (no completion signal: raw bandwidth).
    * ``signal``: the signalling alone (its latency; MoK measured dispatch signalling at 103 us push vs 18 us
      pull).

    Bandwidth counts the bytes that cross between GPUs (rows whose source and expert ranks differ), per GPU:
    ``avg`` = all ranks' remote bytes / world / time, ``busiest`` = the most any one rank receives (dispatch)
    or sends (combine) / time; ``all_rows_GBps_per_gpu`` counts every row (local ones too; the only non-zero
    figure at world size 1). ``barrier_us`` is one symmetric-memory barrier, the completion signal a torch or
    NCCL path needs instead.
    """
    from .distributed import exchange_rows, gather_routing
    from .schedule import build_schedule
    from .triton_ref.push_pull import PushPullPlan, SignalState
    from .transfers import pull_rows

    tokens, hidden, top_k = args.tokens_per_gpu, spec.hidden, spec.top_k
    _, ids = _routing(tokens, spec.num_experts, top_k, routing, 3000 + rank, device)
    ids = gather_routing(ids, None)
    # A capacity just large enough (the worst case would make every expert-side launch mostly padding).
    loose = build_schedule(ids, spec.num_experts, world, args.tile)
    capacity = max(args.tile, -(-max(loose.rows_used()) // args.tile) * args.tile)
    schedule = build_schedule(ids, spec.num_experts, world, args.tile, capacity)
    slots = tokens * top_k
    scope = None if args.scope == "auto" else args.scope
    plan = PushPullPlan(schedule, local_ranks=peers.local_ranks, scope=scope)
    signal = SignalState.on_peers(peers, "bench_signals")
    gen = torch.Generator().manual_seed(4000 + rank)
    x = peers.buffer("bench_x", (tokens, hidden), torch.bfloat16)
    y = peers.buffer("bench_y", (capacity, hidden), torch.bfloat16)
    recv = peers.buffer("bench_recv", (capacity, hidden), torch.bfloat16)
    slot_buf = peers.buffer("bench_slots", (slots, hidden), torch.bfloat16)
    x[rank].copy_(torch.randn(tokens, hidden, generator=gen).to(device, torch.bfloat16))
    y[rank].copy_(torch.randn(capacity, hidden, generator=gen).to(device, torch.bfloat16))
    peers.barrier()

    def call(name: str, variant: str) -> None:
        direction, transfer = name.split("_")
        sig = signal if variant != "data" else None
        if transfer == "dispatch":
            plan.dispatch(x, recv, direction, signal=sig, move_data=variant != "signal")
        else:
            plan.combine(y, slot_buf, direction, signal=sig, move_data=variant != "signal")

    # What this rank must receive, in torch (reading the peers' buffers through their mapping).
    real = schedule.src_rank[rank] >= 0
    want_recv = torch.empty(capacity, hidden, dtype=torch.bfloat16, device=device)
    pull_rows(schedule.rank(rank), 0, capacity, x, want_recv, by_token=True)
    want_slots = torch.empty(slots, hidden, dtype=torch.bfloat16, device=device)
    for d in range(world):
        take = schedule.dest_rank[rank] == d
        want_slots[take] = y[d][schedule.dest_row[rank][take].long()]

    def bitwise_ok(name: str) -> bool:
        """One signalled call into a poisoned buffer: this rank's rows must be complete and right when its own
        launch returns (no barrier in between), on every rank."""
        dispatch = name.endswith("dispatch")
        target = recv if dispatch else slot_buf
        target[rank].fill_(float("nan"))
        peers.barrier()
        call(name, "data+signal")
        got, want = (target[rank][real], want_recv[real]) if dispatch else (target[rank], want_slots)
        ok = torch.tensor([int(torch.equal(got.view(torch.int16), want.view(torch.int16)))], device=device)
        peers.barrier()
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        return bool(ok.item())

    # Who sends what to whom (NCCL all-to-all of the same rows, and the remote-byte accounting).
    src_rank, src_slot = schedule.src_rank.long(), schedule.src_slot.long()
    mine = [(src_rank[rank] == p).nonzero().squeeze(1) for p in range(world)]   # my rows from p
    theirs = [(src_rank[d] == rank).nonzero().squeeze(1) for d in range(world)]  # d's rows from me
    send_counts = [int(r.numel()) for r in theirs]
    recv_counts = [int(r.numel()) for r in mine]
    dispatch_rows = torch.cat([x[rank].index_select(0, src_slot[d][rows] // top_k) for d, rows in enumerate(theirs)])
    combine_rows = torch.cat([y[rank].index_select(0, rows) for rows in mine])

    def nccl_dispatch():
        exchange_rows(dispatch_rows, send_counts, recv_counts, None)

    def nccl_combine():
        exchange_rows(combine_rows, recv_counts, send_counts, None)

    row_bytes = hidden * 2
    remote_in = sum(recv_counts) - recv_counts[rank]
    remote_out = sum(send_counts) - send_counts[rank]
    totals = torch.tensor([remote_in, remote_out, sum(recv_counts)], dtype=torch.float64, device=device)
    everyone = [torch.empty_like(totals) for _ in range(world)]
    dist.all_gather(everyone, totals)
    total_remote = sum(float(t[0]) for t in everyone)
    total_rows = sum(float(t[2]) for t in everyone)
    busiest_in = max(float(t[0]) for t in everyone)
    busiest_out = max(float(t[1]) for t in everyone)

    def rates(ms: float, busiest: float) -> dict:
        return {"ms": ms, "avg_GBps_per_gpu": total_remote / world * row_bytes / ms / 1e6,
                "busiest_GBps": busiest * row_bytes / ms / 1e6,
                "all_rows_GBps_per_gpu": total_rows / world * row_bytes / ms / 1e6}

    result = {"scope": scope or ("gpu" if world == 1 else "sys"), "capacity_rows": capacity, "remote_rows_per_gpu_avg": total_remote / world,
              "busiest_in_rows": busiest_in, "busiest_out_rows": busiest_out}
    timing = dict(iters=args.iters, warmup=args.warmup, device=device)
    for name in TRANSFERS:
        busiest = busiest_in if name.endswith("dispatch") else busiest_out
        entry = rates(_timed(lambda: call(name, "data+signal"), **timing), busiest)
        data_only = rates(_timed(lambda: call(name, "data"), **timing), busiest)
        entry.update({f"data_only_{k}": v for k, v in data_only.items()})
        entry["signal_only_us"] = _timed(lambda: call(name, "signal"), **timing) * 1e3
        entry["bitwise_ok"] = bitwise_ok(name)
        result[name] = entry
    signal.check()
    result["nccl_all_to_all_dispatch"] = rates(_timed(nccl_dispatch, **timing), busiest_in)
    result["nccl_all_to_all_combine"] = rates(_timed(nccl_combine, **timing), busiest_out)
    result["barrier_us"] = _timed(peers.barrier, iters=max(args.iters, 20), warmup=args.warmup, device=device) * 1e3
    return result


def _bench(args: argparse.Namespace) -> int:
    from .distributed import _rank_run_class, default_peers

    rank, world, device = init_distributed(args.device)
    specs = _model_specs(args.models)
    for spec in specs:
        if spec.num_experts % world:
            raise SystemExit(f"{spec.name}: {spec.num_experts} experts do not split over {world} ranks")
    record = {**machine_description(world, device), "command": "bench", "tokens_per_gpu": args.tokens_per_gpu,
              "routing": args.routing, "tile": args.tile, "iters": args.iters, "layers": {}, "transfers": {}}
    backends = []
    for backend in args.backends.split(","):
        try:
            if backend != "nccl":
                _rank_run_class(backend)
            backends.append(backend)
        except (RuntimeError, ValueError) as err:
            record.setdefault("skipped", {})[backend] = str(err)
            if rank == 0:
                print(f"skipping backend {backend}: {err}", flush=True)

    budget = (0.7 * torch.cuda.get_device_properties(device).total_memory if device.type == "cuda"
              else float("inf"))
    for spec in specs:
        for backend in backends:
            key = f"{spec.name}/{backend}"
            need = _weight_bytes(spec, world, backend)
            if need > budget:  # decided alike on every rank, so no rank is left waiting in a collective
                record["layers"][key] = {"error": f"skipped: needs ~{need / 2**30:.0f} GiB of weights and "
                                                  f"gradients per GPU"}
                if rank == 0:
                    print(key, record["layers"][key], flush=True)
                continue
            try:
                record["layers"][key] = _layer_case(spec, args, rank, world, device, backend)
            except torch.cuda.OutOfMemoryError as err:  # same shapes on every rank: all ranks fail alike
                record["layers"][key] = {"error": f"out of memory: {str(err).splitlines()[0]}"}
                torch.cuda.empty_cache()
            if rank == 0:
                print(key, record["layers"][key], flush=True)
                _write_bench(record, args, device, world)  # so far: a call cut short keeps what it measured
    if not args.skip_transfers:
        peers = default_peers(None, device)
        for spec in specs:
            for routing in ("uniform", "zipf"):
                key = f"{spec.name}/{routing}"
                record["transfers"][key] = _transfer_case(spec, args, rank, world, device, routing, peers)
                if rank == 0:
                    print(key, record["transfers"][key], flush=True)
                    _write_bench(record, args, device, world)

    if rank == 0:
        print(bench_table(record))
        stem = _write_bench(record, args, device, world)
        print(f"wrote {stem}.json and {stem}.md")
    dist.barrier()
    return 0


def _write_bench(record: dict, args: argparse.Namespace, device: torch.device, world: int) -> str:
    """Write the record as ``<stem>.json`` and its tables as ``<stem>.md``; returns the stem."""
    stem = args.out or str(DEFAULT_RESULTS / f"bench_{device.type}_{world}rank")
    Path(stem).parent.mkdir(parents=True, exist_ok=True)
    Path(stem + ".json").write_text(json.dumps(record, indent=2))
    Path(stem + ".md").write_text(bench_table(record) + "\n")
    return stem


def bench_table(record: dict) -> str:
    """Markdown tables of a bench record: layer times with the ratio to the NCCL baseline, then transfers."""
    lines = [f"## {record['machine_kind']}: {record['gpu_count']} GPU(s), {record['tokens_per_gpu']} tokens/GPU, "
             f"{record['routing']} routing", "",
             "| model / backend | fwd ms | bwd ms | fwd TFLOP/s/GPU | bwd TFLOP/s/GPU | fwd vs nccl | bwd vs nccl |",
             "|---|---|---|---|---|---|---|"]
    for key, r in record["layers"].items():
        if "error" in r:
            lines.append(f"| {key} | {r['error']} | | | | | |")
            continue
        base = record["layers"].get(key.rsplit("/", 1)[0] + "/nccl", {})
        ratios = [f"{base[f'{p}_ms'] / r[f'{p}_ms']:.2f}x" if f"{p}_ms" in base else "-"
                  for p in ("forward", "backward")]
        lines.append(f"| {key} | {r['forward_ms']:.3f} | {r['backward_ms']:.3f} | {r['forward_tflops']:.0f} | "
                     f"{r['backward_tflops']:.0f} | {ratios[0]} | {ratios[1]} |")
    if record["transfers"]:
        names = [*TRANSFERS, "nccl_all_to_all_dispatch", "nccl_all_to_all_combine"]
        lines += ["", "Transfers (mok.triton_ref.push_pull across GPUs, rows + completion signal): GB/s per GPU of "
                  "remote bytes, average (busiest GPU) [rows only, no signal]; goal >= 360 GB/s (80% of 450) per "
                  "direction", "", "| model / routing | " + " | ".join(names) + " |",
                  "|---|" + "---|" * len(names)]
        for key, r in record["transfers"].items():
            cells = []
            for n in names:
                if n not in r:
                    cells.append("-")
                    continue
                cell = f"{r[n]['avg_GBps_per_gpu']:.0f} ({r[n]['busiest_GBps']:.0f})"
                if "data_only_avg_GBps_per_gpu" in r[n]:
                    cell += f" [{r[n]['data_only_avg_GBps_per_gpu']:.0f}]"
                if r[n].get("bitwise_ok") is False:
                    cell += " WRONG"
                cells.append(cell)
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
        lines += ["", "Completion signalling alone, us per call (MoK: dispatch 103 push vs 18 pull)", "",
                  "| model / routing | scope | " + " | ".join(TRANSFERS) + " | symm-mem barrier |",
                  "|---|---|" + "---|" * (len(TRANSFERS) + 1)]
        for key, r in record["transfers"].items():
            cells = [f"{r[n]['signal_only_us']:.1f}" if n in r else "-" for n in TRANSFERS]
            lines.append(f"| {key} | {r.get('scope', '-')} | " + " | ".join(cells) + f" | {r['barrier_us']:.1f} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m mok.dist_cli",
                                     description="mok expert parallelism across processes")
    sub = parser.add_subparsers(dest="command", required=True)
    val = sub.add_parser("validate", help="distributed forward/backward vs the single-process reference, bitwise")
    val.add_argument("--shape", default="64,64,32,8,2", help="preset (mok.config.PRESETS) or T,H,I,E,K (global)")
    val.add_argument("--tokens", type=int, help="override the shape's (global) token count")
    val.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    val.add_argument("--backend", default="reference,nccl", help="comma-separated: reference, nccl, triton, cuda")
    val.add_argument("--transport", default="collective,peers,peers-triton",
                     help="comma-separated: collective (all_to_all), peers (torch over peer memory), peers-triton "
                          "(the Triton transfer kernels over peer memory)")
    val.add_argument("--tile", type=int, help="expert padding (default 16 for tiny shapes, else 128)")
    val.add_argument("--minibatch", type=int, help="minibatch rows (default: the policy)")
    val.add_argument("--ring", type=int, help="ring rows (default: the whole schedule)")
    val.add_argument("--skew", type=float, default=1.0, help="router bias towards low expert ids")
    val.add_argument("--seed", type=int, default=0)
    val.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    val.add_argument("--out", help="JSON path (default experiments/results/multi_gpu/validate_<dev>_<N>rank.json)")
    ben = sub.add_parser("bench", help="layer time vs the NCCL baseline, transfer bandwidth, signalling latency")
    ben.add_argument("--models", default="kimi-k2.7,glm-5.2,qwen3.5-397b,deepseek-v4-pro",
                     help="comma-separated names from mok.config.MODELS, or one custom 'H,I,E,K'")
    ben.add_argument("--tokens-per-gpu", type=int, default=2048)
    ben.add_argument("--backends", default="nccl,triton,cuda",
                     help="comma-separated: nccl, reference, triton, cuda (those unavailable here are skipped)")
    ben.add_argument("--routing", choices=["uniform", "zipf"], default="uniform", help="routing of the layer runs")
    ben.add_argument("--tile", type=int, default=128)
    ben.add_argument("--iters", type=int, default=10)
    ben.add_argument("--warmup", type=int, default=3)
    ben.add_argument("--skip-transfers", action="store_true")
    ben.add_argument("--scope", choices=["auto", "gpu", "sys"], default="auto",
                     help="memory scope of the push/pull signal atomics: auto = gpu at world size 1, sys across "
                          "GPUs (gpu across GPUs is outside the PTX memory model's guarantees: measurement only)")
    ben.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    ben.add_argument("--out", help="path stem for .json and .md "
                     "(default experiments/results/multi_gpu/bench_<dev>_<N>rank)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc = {"validate": _validate, "bench": _bench}[args.command](args)
        from .distributed import release_default_peers
        release_default_peers()  # collective: only on the success path, so a failing rank cannot hang here
        return rc
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
