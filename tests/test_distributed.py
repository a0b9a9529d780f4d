"""Expert parallelism across processes, on CPUs: 2 and 4 gloo ranks spawned with torch.multiprocessing.

Each world size is one spawn (process start-up dominates); the ranks run every scenario, rank 0 saves the
gathered results, and the checks run here against single-process runs:

* ``distributed_moe(backend="triton")`` (TritonRankRun over host-shared peer memory, interpreted), bf16 with
  backward replay: bitwise equal to ``mok.moe(..., backend="triton")`` at ``ep_size=world`` and ``1``;
* ``distributed_moe(backend="reference")`` through the three transports (``all_to_all_single``; torch indexing
  over host-shared peer memory; the Triton transfer kernels over the same memory, interpreted), fp32 and bf16,
  with a ring small enough to force backward replay: output and all five gradients bitwise equal to
  ``mok.moe(..., ep_size=world)`` and ``ep_size=1``;
* the NCCL-style baseline (all-to-all over gloo, grouped GEMM loop) against the fp64 oracle, by tolerance;
* ``MoELayer(..., ep_group=WORLD)`` forward/backward (default transport, whole-schedule minibatch) against a
  one-process layer with all experts;
* ranks that disagree on the token count raise the same ValueError everywhere (no hang);
* in one process: the shared layer run with emulated ranks and the Triton transport (bitwise).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import mok
from mok import MoKConfig
from mok.config import MoEShape
from mok.dist_cli import free_port
from mok.schedule import build_schedule
from mok.validate import DTYPES, TOLERANCE, random_problem

from conftest import HAS_CUDA, OUTPUT_NAMES, assert_bitwise_equal, rel_err, run_layer

SHAPE = MoEShape("dist", 64, 32, 16, 8, 2)
SKEW = 1.5  # hot and empty experts, uneven rows per rank
SEED = 5
# 16-row minibatches through a 2-minibatch ring: ranks with more rows replay in the backward.
RING = MoKConfig(expert_padding=16, minibatch_rows=16, ring_rows=32)
WHOLE = MoKConfig(expert_padding=16)
LAYER = dict(hidden_size=32, intermediate_size=16, num_experts=8, top_k=2)


def _problem(dtype_name: str) -> list[torch.Tensor]:
    return random_problem(SHAPE, DTYPES[dtype_name], "cpu", seed=SEED, skew=SKEW)


def _full_layer() -> mok.MoELayer:
    torch.manual_seed(7)
    return mok.MoELayer(**LAYER, config=WHOLE, dtype=torch.bfloat16)


def _layer_input() -> torch.Tensor:
    return torch.randn(SHAPE.tokens, LAYER["hidden_size"], generator=torch.Generator().manual_seed(8)).bfloat16()


# --------------------------------------------------------------------------------------------------------
# Worker (runs in each spawned rank)
# --------------------------------------------------------------------------------------------------------

def _worker(rank: int, world: int, ports: tuple[int, int], out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(ports[0]))
    os.environ.setdefault("TRITON_INTERPRET", "1")  # the Triton transfer kernels run on CPU tensors
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from mok.dist_cli import all_gather_rows, run_distributed
    from mok.distributed import distributed_moe, release_default_peers

    results: dict = {}
    for dtype_name in DTYPES:
        problem = _problem(dtype_name)
        for transport in ("collective", "peers", "peers-triton"):
            results[f"reference/{transport}/ring/{dtype_name}"] = run_distributed(
                problem, backend="reference", transport=transport, config=RING, grad_seed=SEED + 1)
        results[f"nccl/{dtype_name}"] = run_distributed(problem, backend="nccl", grad_seed=SEED + 1)

    # The Triton backend across processes (TritonRankRun: its kernels read and write host-shared peer memory,
    # interpreted), bf16 through the replaying ring; rank 0 also runs the one-process emulations it must match.
    problem = _problem("bf16")
    results["triton/peers/ring/bf16"] = run_distributed(problem, backend="triton", transport="peers", config=RING,
                                                        grad_seed=SEED + 1)
    if rank == 0:
        results["triton/emulated"] = [run_layer("triton", problem, ep_size=ep, config=config, grad_seed=SEED + 1)
                                      for ep, config in ((world, RING), (1, WHOLE))]

    # MoELayer with an EP group: this rank's experts copied from the one-process layer.
    full = _full_layer()
    layer = mok.MoELayer(**LAYER, config=WHOLE, dtype=torch.bfloat16, ep_group=dist.group.WORLD)
    local, tokens = LAYER["num_experts"] // world, SHAPE.tokens // world
    experts, own = slice(rank * local, (rank + 1) * local), slice(rank * tokens, (rank + 1) * tokens)
    with torch.no_grad():
        layer.router.weight.copy_(full.router.weight)
        for name in ("w_gate", "w_up", "w_down"):
            getattr(layer, name).copy_(getattr(full, name)[experts])
    x = _layer_input()[own].clone().requires_grad_(True)
    out = layer(x.view(2, -1, LAYER["hidden_size"]))  # any leading shape
    out.float().pow(2).sum().backward()
    results["layer"] = [all_gather_rows(t) for t in (out.reshape(tokens, -1), x.grad, layer.w_gate.grad,
                                                     layer.w_up.grad, layer.w_down.grad)]

    # Ranks that disagree on T_local must all raise (gather_routing checks sizes before gathering ids).
    problem = _problem("fp32")
    n = 4 + rank
    try:
        distributed_moe(problem[0][:n], problem[1][:n], problem[2][:n], problem[3][:local], problem[4][:local],
                        problem[5][:local], num_experts=8)
        results["mismatch"] = "no error"
    except ValueError as err:
        results["mismatch"] = str(err)
    mismatch = [None] * world
    dist.all_gather_object(mismatch, results["mismatch"])
    results["mismatch"] = mismatch

    release_default_peers()
    if rank == 0:
        torch.save(results, os.path.join(out_dir, "results.pt"))
    dist.destroy_process_group()
    if world == 2:  # the torchrun entry points, in the same processes (a spawn costs more than the runs)
        _run_cli(rank, world, ports[1], out_dir)


@functools.lru_cache(maxsize=None)
def _spawn(world: int) -> tuple[dict, str]:
    """Run the workers once per world size (pytest may set a parametrized module fixture up twice).
    Returns rank 0's results and the folder the entry points wrote to (kept until the session ends)."""
    out_dir = tempfile.mkdtemp(prefix=f"mok-dist-{world}-")
    atexit.register(shutil.rmtree, out_dir, True)
    mp.spawn(_worker, args=(world, (free_port(), free_port()), out_dir), nprocs=world, join=True)
    return torch.load(os.path.join(out_dir, "results.pt")), out_dir


@functools.lru_cache(maxsize=None)
def _single_process(dtype_name: str):
    problem = _problem(dtype_name)
    return (dtype_name, problem, run_layer("reference", problem, config=WHOLE, grad_seed=SEED + 1),
            run_layer("oracle", problem, grad_seed=SEED + 1))


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def spawned(request):
    return request.param, _spawn(request.param)[0]


@pytest.fixture(scope="module", params=list(DTYPES))
def single_process(request):
    """One-process reference at EP 1 (the bits every run must reproduce) and the fp64 oracle."""
    return _single_process(request.param)


# --------------------------------------------------------------------------------------------------------
# Checks
# --------------------------------------------------------------------------------------------------------

def test_ring_config_forces_replay():
    """The RING config must make some rank hold more minibatches than its ring (else replay is untested)."""
    problem = _problem("fp32")
    for world in (2, 4):
        rows = build_schedule(problem[1], SHAPE.num_experts, world, RING.expert_padding).rows_used()
        assert max(rows) > RING.ring_rows, f"world {world}: rows per rank {rows} all fit the ring"


@pytest.mark.parametrize("run", ["reference/collective/ring", "reference/peers/ring", "reference/peers-triton/ring"])
def test_reference_bitwise_equals_single_process(spawned, single_process, run):
    world, results = spawned
    dtype_name, problem, ep1, _ = single_process
    got = results[f"{run}/{dtype_name}"]
    ep_world = run_layer("reference", problem, ep_size=world, config=RING, grad_seed=SEED + 1)
    for name, g, a, b in zip(OUTPUT_NAMES, got, ep_world, ep1):
        assert not torch.isnan(g).any(), f"{name}: NaN (an unwritten slot)"
        assert_bitwise_equal(g, a, f"{run} {dtype_name} {name} vs 1-process EP {world}")
        assert_bitwise_equal(g, b, f"{run} {dtype_name} {name} vs 1-process EP 1")


def test_emulated_ranks_through_the_triton_transport(ep_size=4):
    """One implementation of the per-rank arithmetic: the layer run behind ``mok.moe(backend="reference")``,
    with the emulated ranks' rows moved by the Triton transfer kernels instead of torch indexing, gives the
    same bits (forward and backward, ring replay included)."""
    from mok.backends.reference import LayerRun
    from mok.comm import EmulatedPeers
    from mok.comm.transport import TritonPeerTransport
    from mok.triton_ref._common import INTERPRETING

    device = "cuda" if HAS_CUDA else "cpu"
    if device == "cpu" and not INTERPRETING:
        pytest.skip("mok.triton_ref was imported without TRITON_INTERPRET=1")
    problem = [t.to(device) for t in _problem("bf16")]
    x, ids, w, wg, wu, wd = problem
    schedule = build_schedule(ids, SHAPE.num_experts, ep_size, RING.expert_padding)
    run = LayerRun(x, w, wg, wu, wd, schedule=schedule, config=RING,
                   transport=TritonPeerTransport(schedule, EmulatedPeers(ep_size, device)))
    out = run.forward()
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(SEED + 1)).to(device, out.dtype)
    got = [out, *run.backward(grad)]
    want = run_layer("reference", problem, ep_size=ep_size, config=RING, grad_seed=SEED + 1)
    for name, g, a in zip(OUTPUT_NAMES, got, want):
        assert_bitwise_equal(g, a, f"Triton transport, EP {ep_size} emulated: {name}")


def test_triton_rank_run_bitwise_equals_single_process(spawned):
    world, results = spawned
    got = results["triton/peers/ring/bf16"]
    for want, what in zip(results["triton/emulated"], (f"mok.moe(backend='triton', ep_size={world})",
                                                       "mok.moe(backend='triton', ep_size=1)")):
        for name, g, w in zip(OUTPUT_NAMES, got, want):
            assert not torch.isnan(g).any(), f"{name}: NaN (an unwritten slot)"
            assert_bitwise_equal(g, w, f"triton across {world} processes, {name} vs {what}")


def test_nccl_baseline_matches_oracle(spawned, single_process):
    world, results = spawned
    dtype_name, _, _, oracle = single_process
    tolerance = TOLERANCE[dtype_name]
    for name, g, o in zip(OUTPUT_NAMES, results[f"nccl/{dtype_name}"], oracle):
        err = rel_err(g, o)
        assert err <= tolerance, f"nccl baseline {dtype_name} {name} at {world} ranks: rel. error {err:.2e}"


def test_moe_layer_with_ep_group(spawned):
    world, results = spawned
    out, dx, d_gate, d_up, d_down = results["layer"]
    full = _full_layer()
    x = _layer_input().requires_grad_(True)
    want = full(x)
    want.float().pow(2).sum().backward()
    assert_bitwise_equal(out, want.detach(), f"layer output at {world} ranks")
    assert_bitwise_equal(d_gate, full.w_gate.grad, "d_w_gate")
    assert_bitwise_equal(d_up, full.w_up.grad, "d_w_up")
    assert_bitwise_equal(d_down, full.w_down.grad, "d_w_down")
    # dx also carries the router's backward (a [T, E] x [E, H] product whose blocking may depend on T).
    assert rel_err(dx, x.grad) < 1e-2


def test_token_count_mismatch_raises_everywhere(spawned):
    world, results = spawned
    assert len(results["mismatch"]) == world
    for message in results["mismatch"]:
        assert "same number of tokens" in message, message


# --------------------------------------------------------------------------------------------------------
# The torchrun entry points, run by the 2-rank workers (what `torchrun --nproc-per-node 2 -m mok.dist_cli` runs)
# --------------------------------------------------------------------------------------------------------

def _run_cli(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    from mok.dist_cli import main

    rc = main(["validate", "--device", "cpu", "--shape", "32,16,8,4,2", "--dtype", "fp32", "--minibatch", "16",
               "--ring", "16", "--out", os.path.join(out_dir, "validate.json")])
    if rc != 0:
        raise SystemExit(f"validate returned {rc} on rank {rank}")
    rc = main(["bench", "--device", "cpu", "--models", "16,8,4,2", "--tokens-per-gpu", "16", "--backends",
               "nccl,reference", "--tile", "16", "--iters", "1", "--warmup", "0", "--out",
               os.path.join(out_dir, "bench")])
    if rc != 0:
        raise SystemExit(f"bench returned {rc} on rank {rank}")


def test_dist_cli_validate_and_bench():
    import json
    from pathlib import Path

    tmp_path = Path(_spawn(2)[1])
    record = json.loads((tmp_path / "validate.json").read_text())
    assert record["gpu_count"] == 2
    assert record["source_digest"] and "git_commit" in record  # which code ran (the commit: where git is)
    assert set(record["runs"]) == {"reference/collective", "reference/peers", "reference/peers-triton", "nccl"}
    assert all(run["passed"] for run in record["runs"].values())
    ref_fingerprints = {record["runs"][name]["fingerprint"]
                        for name in ("reference/collective", "reference/peers", "reference/peers-triton")}
    assert ref_fingerprints == {record["fingerprints"]["reference ep_size=1 (single process)"]}

    bench = json.loads((tmp_path / "bench.json").read_text())
    assert {"custom-16x8x4x2/nccl", "custom-16x8x4x2/reference"} <= set(bench["layers"])
    for routing in ("uniform", "zipf"):
        transfer = bench["transfers"][f"custom-16x8x4x2/{routing}"]
        assert transfer["scope"] == "sys"  # two processes: the signal atomics must reach the other rank
        for name in ("pull_dispatch", "push_dispatch", "push_combine", "pull_combine"):
            # The push/pull kernels across the two processes, each launching its own rank's programs.
            assert transfer[name]["bitwise_ok"] is True, (routing, name)
            assert transfer[name]["ms"] > 0 and transfer[name]["data_only_ms"] > 0
            assert transfer[name]["signal_only_us"] > 0
        for name in ("nccl_all_to_all_dispatch", "nccl_all_to_all_combine"):
            assert transfer[name]["ms"] > 0
    table = (tmp_path / "bench.md").read_text()
    assert "fwd vs nccl" in table and "bwd vs nccl" in table and "Completion signalling alone" in table
    assert "WRONG" not in table


def test_validate_runs_each_backend_only_with_the_transports_it_takes():
    """``validate``'s plan: every backend with each requested transport it lists in ``TRANSPORTS`` (in the order
    given, the same on every rank), nccl once with its own all-to-all, the rest recorded with the reason."""
    from mok.dist_cli import planned_runs

    runs, skipped = planned_runs("reference,nccl,triton,nonsense", "collective,peers")
    assert runs == [("reference", "collective"), ("reference", "peers"), ("nccl", None), ("triton", "peers")]
    assert list(skipped) == ["triton/collective", "nonsense"]
    assert "supports the transports peers, peers-triton" in skipped["triton/collective"]
    assert "must be one of" in skipped["nonsense"]


def test_bench_layer_returns_its_gradients_instead_of_accumulating_them():
    """dist_cli bench's layer calls (also experiments/profile_dist_backward.py's): the backward returns x's, the
    routing weights' and the three expert weights' gradients and leaves every .grad unset, so a timed backward holds
    no read-add-write of the weight gradients (round 27: 17 GB per GPU at kimi-k2.7, EP 2)."""
    import torch.distributed as dist

    from mok.config import ModelSpec
    from mok.dist_cli import init_distributed, layer_calls, layer_inputs

    started_here = not dist.is_initialized()
    rank, world, device = init_distributed("cpu")
    try:
        spec = ModelSpec("tiny", 4, 16, 8, 2)
        inputs = layer_inputs(spec, 16, "uniform", 16, rank, world, device)
        forward, backward = layer_calls(spec, inputs, "reference")
        for _ in range(2):
            grads = backward(forward())
        leaves = [inputs[name] for name in ("x", "weights", "wg", "wu", "wd")]
        assert [g.shape for g in grads] == [leaf.shape for leaf in leaves]
        assert all(leaf.grad is None for leaf in leaves)
        assert all(bool(g.abs().sum() > 0) for g in grads)
    finally:
        if started_here:
            dist.destroy_process_group()
