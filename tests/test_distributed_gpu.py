"""Expert parallelism on one GPU: a 1-process NCCL group, PyTorch symmetric memory, the torchrun entry points.

World size 1 is what a single H200 allows; the same code runs unchanged at 2, 4 and 8 GPUs under torchrun
(see experiments/multi_gpu/README.md). Skips with the reason when symmetric memory is unavailable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist

import mok
from mok import MoKConfig
from mok.comm.symm_mem import MULTICAST_OFF, SymmetricMemoryPeers, symmetric_memory_available
from mok.config import MoEShape
from mok.validate import TOLERANCE, random_problem

from conftest import OUTPUT_NAMES, assert_bitwise_equal, rel_err, run_layer

pytestmark = pytest.mark.gpu

SHAPE = MoEShape("dist-gpu", 256, 128, 64, 16, 4)
CONFIG = MoKConfig(expert_padding=16, minibatch_rows=64, ring_rows=128)  # small ring: backward replays


@pytest.fixture(scope="module")
def group():
    """A one-process NCCL group with an in-process store (or the group already running)."""
    ok, why = symmetric_memory_available("cuda")
    if not ok:
        pytest.skip(f"symmetric memory unavailable: {why}")
    started = not dist.is_initialized()
    if started:
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                                device_id=torch.device("cuda", 0))
    yield dist.group.WORLD
    from mok.distributed import release_default_peers
    release_default_peers()
    if started:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def peers(group):
    try:
        return SymmetricMemoryPeers(group)
    except RuntimeError as err:
        pytest.skip(f"symmetric memory unavailable: {err}")


def _problem(dtype):
    return random_problem(SHAPE, dtype, "cuda", seed=3, skew=1.0)


def test_multicast_stays_off():
    for name, value in MULTICAST_OFF.items():
        assert os.environ.get(name) == value, name


def test_symmetric_buffers(peers):
    buf = peers.buffer("test_buf", (8, 32), torch.bfloat16)
    assert peers.local_ranks == [0] and buf.world_size == peers.world_size == 1
    assert buf.ptr_table.device.type == "cuda" and buf.ptr_table.dtype == torch.int64
    assert int(buf.ptr_table[0]) == buf[0].data_ptr()
    assert peers.buffer("test_buf", (8, 32), torch.bfloat16) is buf  # cached
    values = torch.randn(8, 32, device="cuda").bfloat16()
    buf[0].copy_(values)
    peers.barrier()
    assert torch.equal(buf[0], values)
    bigger = peers.buffer("test_buf", (16, 32), torch.bfloat16)  # a new shape: a new allocation
    assert bigger.shape == (16, 32) and bigger is not buf


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("transport", ["collective", "peers", "peers-triton"])
def test_reference_world1_bitwise(group, peers, dtype, transport):
    from mok.dist_cli import run_distributed

    problem = _problem(dtype)
    got = run_distributed(problem, backend="reference", transport=transport, config=CONFIG, grad_seed=4)
    want = run_layer("reference", problem, config=CONFIG, grad_seed=4)
    emulated = run_layer("reference", problem, ep_size=4, config=CONFIG, grad_seed=4)
    for name, g, a, b in zip(OUTPUT_NAMES, got, want, emulated):
        assert_bitwise_equal(g, a, f"{transport} {name} vs mok.moe ep_size=1")
        assert_bitwise_equal(g, b, f"{transport} {name} vs mok.moe ep_size=4")


def test_triton_world1_bitwise(group, peers):
    from mok.dist_cli import run_distributed
    from mok.distributed import _rank_run_class

    try:
        _rank_run_class("triton")
    except RuntimeError as err:
        pytest.skip(str(err))
    problem = _problem(torch.bfloat16)
    got = run_distributed(problem, backend="triton", transport="peers", config=CONFIG, grad_seed=4)
    want = run_layer("triton", problem, config=CONFIG, grad_seed=4)
    for name, g, w in zip(OUTPUT_NAMES, got, want):
        assert_bitwise_equal(g, w, f"triton {name} vs mok.moe(backend='triton') ep_size=1")


@pytest.mark.parametrize("top_k", [4, 1], ids=["top4", "top1-fused"])
def test_cuda_world1_bitwise(group, peers, top_k):
    """The megakernel as one real rank (expert launch, barrier, combine launch over symmetric memory) equals
    ``mok.moe(backend="cuda")`` bit for bit: output and all five gradients."""
    from mok.dist_cli import run_distributed
    from mok.distributed import _rank_run_class

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the SM90 megakernel needs a Hopper GPU")
    try:
        _rank_run_class("cuda")
    except RuntimeError as err:
        pytest.skip(str(err))
    shape = MoEShape("dist-gpu-cuda", 512, 256, 128, 16, top_k)
    problem = random_problem(shape, torch.bfloat16, "cuda", seed=5, skew=1.0)
    config = MoKConfig(expert_padding=128)
    got = run_distributed(problem, backend="cuda", transport="peers", config=config, grad_seed=4)
    want = run_layer("cuda", problem, config=config, grad_seed=4)
    for name, g, w in zip(OUTPUT_NAMES, got, want):
        assert_bitwise_equal(g, w, f"cuda {name} vs mok.moe(backend='cuda') ep_size=1")
    oracle = run_layer("oracle", problem, grad_seed=4)
    for name, g, o in zip(OUTPUT_NAMES, got, oracle):
        assert rel_err(g, o) <= TOLERANCE["bf16"], f"cuda {name}: {rel_err(g, o):.2e} vs the fp64 oracle"


def test_nccl_baseline_world1(group):
    from mok.dist_cli import run_distributed

    problem = _problem(torch.bfloat16)
    got = run_distributed(problem, backend="nccl", grad_seed=4)
    oracle = run_layer("oracle", problem, grad_seed=4)
    for name, g, o in zip(OUTPUT_NAMES, got, oracle):
        assert rel_err(g, o) <= TOLERANCE["bf16"], f"nccl baseline {name}: {rel_err(g, o):.2e}"


def _dist_cli(*args: str) -> subprocess.CompletedProcess:
    """``python -m mok.dist_cli ...`` as a fresh one-process group (its own NCCL group and port)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(mok.__file__)))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "mok.dist_cli", *args], capture_output=True, text=True,
                          timeout=300, env=env, cwd=root)


def test_dist_cli_validate_one_gpu(tmp_path):
    out = tmp_path / "validate.json"
    proc = _dist_cli("validate", "--device", "cuda", "--shape", "256,128,64,16,4", "--minibatch", "64",
                     "--ring", "128", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads(out.read_text())
    assert record["gpu_count"] == 1 and all(run["passed"] for run in record["runs"].values())
    assert {"reference/collective", "reference/peers", "reference/peers-triton", "nccl"} <= set(record["runs"])


def test_dist_cli_bench_one_gpu(tmp_path):
    stem = tmp_path / "bench"
    proc = _dist_cli("bench", "--device", "cuda", "--models", "1024,512,16,4", "--tokens-per-gpu", "512",
                     "--backends", "nccl,reference", "--iters", "2", "--warmup", "1", "--out", str(stem))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = json.loads((tmp_path / "bench.json").read_text())
    layer = record["layers"]["custom-1024x512x16x4/nccl"]
    assert {"forward_ms", "backward_ms", "forward_tflops"} <= set(layer), layer
    assert set(record["transfers"]) == {"custom-1024x512x16x4/uniform", "custom-1024x512x16x4/zipf"}
    for key, transfer in record["transfers"].items():
        for name in ("pull_dispatch", "push_dispatch", "push_combine", "pull_combine"):
            assert transfer[name]["bitwise_ok"] is True, (key, name)
            assert transfer[name]["all_rows_GBps_per_gpu"] > 0 and transfer[name]["signal_only_us"] > 0


@pytest.mark.parametrize("scope", ["gpu", "sys"])
def test_push_pull_kernels_on_symmetric_memory(peers, scope):
    """The push/pull kernels with this process's rank only, rows and signal words in symmetric memory, both
    signal scopes (``sys`` is what runs across GPUs): every transfer equals the torch semantics, bit for bit."""
    from mok.schedule import build_schedule
    from mok.transfers import pull_rows, push_rows
    from mok.triton_ref.push_pull import PushPullPlan, SignalState

    world, rank, hidden, tokens, top_k = peers.world_size, peers.rank, 1024, 256, 4
    gen = torch.Generator().manual_seed(11)
    _, ids = mok.route(torch.randn(world * tokens, 16, generator=gen).cuda(), top_k)
    schedule = build_schedule(ids, 16, world, 16)
    plan = PushPullPlan(schedule, local_ranks=peers.local_ranks, scope=scope)
    x = peers.buffer("pp_x", (tokens, hidden), torch.bfloat16)
    y = peers.buffer("pp_y", (schedule.capacity, hidden), torch.bfloat16)
    x[rank].copy_(torch.randn(tokens, hidden, generator=gen).bfloat16())
    y[rank].copy_(torch.randn(schedule.capacity, hidden, generator=gen).bfloat16())
    recv = peers.buffer("pp_recv", (schedule.capacity, hidden), torch.bfloat16)
    slots = peers.buffer("pp_slots", (schedule.slots_per_rank, hidden), torch.bfloat16)
    want_slots = peers.buffer("pp_want_slots", (schedule.slots_per_rank, hidden), torch.bfloat16)
    peers.barrier()
    want_recv = torch.empty(schedule.capacity, hidden, dtype=torch.bfloat16, device="cuda")
    pull_rows(schedule.rank(rank), 0, schedule.capacity, x, want_recv, by_token=True)
    push_rows(schedule.rank(rank), 0, schedule.capacity, y[rank], want_slots)
    peers.barrier()
    real = schedule.src_rank[rank] >= 0
    signal = SignalState.on_peers(peers, f"pp_signals_{scope}")
    for direction in ("pull", "push"):
        for sig in (None, signal):
            recv[rank].fill_(float("nan"))
            slots[rank].fill_(float("nan"))
            peers.barrier()
            plan.dispatch(x, recv, direction, signal=sig)
            plan.combine(y, slots, direction, signal=sig)
            peers.barrier()
            what = (direction, "signal" if sig is not None else "data", scope)
            assert torch.equal(recv[rank][real].view(torch.int16), want_recv[real].view(torch.int16)), what
            assert torch.isnan(recv[rank][~real].float()).all(), what
            assert torch.equal(slots[rank].view(torch.int16), want_slots[rank].view(torch.int16)), what
    signal.check()
    # Epochs count every signalled call (pull dispatch 1, pull combine 2, then the two pushes).
    assert int(signal.ready[rank]) == 2
    pushed = int(plan.rows_per_expert_rank[rank]) + int(plan.slots_per_source_rank[rank])
    assert int(signal.arrivals[rank]) == int(signal.targets[rank]) == pushed


def test_nvshmem_peers_world1_bitwise(group):
    """Only where the nvshmem4py wheel was carried to the GPU machine; skipped otherwise."""
    from mok.comm.nvshmem_peers import NvshmemPeers, nvshmem_available
    from mok.distributed import distributed_moe

    ok, why = nvshmem_available()
    if not ok:
        pytest.skip(why)
    peers = NvshmemPeers(group)
    try:
        buf = peers.buffer("nvshmem_test", (4, 16), torch.float32)
        assert int(buf.ptr_table[0]) == buf[0].data_ptr()
        problem = _problem(torch.bfloat16)
        x, ids, w, wg, wu, wd = (p.detach().clone() for p in problem)
        for leaf in (x, w, wg, wu, wd):
            leaf.requires_grad_(True)
        out = distributed_moe(x, ids, w, wg, wu, wd, group=group, num_experts=SHAPE.num_experts,
                              transport="peers", peers=peers, config=CONFIG)
        grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(4)).to("cuda", out.dtype)
        out.backward(grad)
        got = [out.detach(), x.grad, w.grad, wg.grad, wu.grad, wd.grad]
    finally:
        peers.close()
    want = run_layer("reference", problem, config=CONFIG, grad_seed=4)
    for name, g, a in zip(OUTPUT_NAMES, got, want):
        assert_bitwise_equal(g, a, f"nvshmem peers {name} vs mok.moe ep_size=1")
