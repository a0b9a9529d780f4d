"""Push vs pull row-transfer kernels (mok/triton_ref/push_pull.py) under the Triton interpreter on a CPU.

Both directions must move exactly the same bytes to exactly the same places, bit for bit, and agree with the
PyTorch semantics of :mod:`mok.transfers`; padding rows must stay untouched; signalling must count every row.
Emulated ranks run in one launch; real peers (one rank per process, signal words in peer memory) are tested
with two CPU processes over host-shared memory, each launching only its own rank's programs.
"""

from __future__ import annotations

import itertools
import os
import tempfile

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conftest import HAS_CUDA, bits

if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are defined

import mok  # noqa: E402
from mok.comm import EmulatedPeers  # noqa: E402
from mok.schedule import build_schedule  # noqa: E402
from mok.dist_cli import free_port  # noqa: E402
from mok.transfers import pull_rows, push_rows  # noqa: E402

push_pull = pytest.importorskip("mok.triton_ref.push_pull")
pytestmark = pytest.mark.skipif(not HAS_CUDA and os.environ.get("TRITON_INTERPRET") != "1",
                                reason="needs a GPU or TRITON_INTERPRET=1")

DEVICE = "cuda" if HAS_CUDA else "cpu"


def routing_case(ranks, tokens_per_rank=8, hidden=32, experts=6, top_k=2, tile=4, skew=0.0, seed=0,
                 device=DEVICE):
    """A routing over ``ranks`` ranks, its schedule, and every rank's random ``x`` ``[R, T, H]`` and expert
    outputs ``y`` ``[R, capacity, H]`` (bf16; the same in every process that asks with the same seed)."""
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(ranks * tokens_per_rank, experts, generator=gen)
    logits -= skew * torch.arange(experts, dtype=torch.float32)  # skew > 0: hot low experts, empty high ones
    _, ids = mok.route(logits.to(device), top_k)
    schedule = build_schedule(ids, experts, ranks, tile)
    # One rank at a time, so a real size never holds every rank's fp32 values at once.
    x = torch.stack([torch.randn(tokens_per_rank, hidden, generator=gen).to(device, torch.bfloat16)
                     for _ in range(ranks)])
    y = torch.stack([torch.randn(schedule.capacity, hidden, generator=gen).to(device, torch.bfloat16)
                     for _ in range(ranks)])
    return schedule, x, y


def make_case(ranks, tokens_per_rank=8, hidden=32, experts=6, top_k=2, tile=4, skew=0.0, seed=0):
    """A routing over ``ranks`` emulated ranks, its schedule and plan, and random source buffers."""
    schedule, x_all, y_all = routing_case(ranks, tokens_per_rank, hidden, experts, top_k, tile, skew, seed)
    peers = EmulatedPeers(ranks, DEVICE)
    x = peers.buffer("x", (tokens_per_rank, hidden), torch.bfloat16)
    y = peers.buffer("y", (schedule.capacity, hidden), torch.bfloat16)
    for r in range(ranks):
        x[r].copy_(x_all[r])
        y[r].copy_(y_all[r])
    return schedule, push_pull.PushPullPlan(schedule), peers, x, y


def poisoned(peers, name, shape):
    buf = peers.buffer(name, shape, torch.bfloat16)
    for view in buf.views:
        view.fill_(float("nan"))  # unwritten elements stay NaN
    return buf


CASES = [pytest.param(2, 0.0, id="2ranks-uniform"), pytest.param(3, 1.5, id="3ranks-skewed")]


@pytest.mark.parametrize("ranks,skew", CASES)
def test_dispatch_push_and_pull_move_the_same_bytes_as_transfers(ranks, skew):
    schedule, plan, peers, x, _ = make_case(ranks, skew=skew)
    hidden = x.shape[-1]
    got = {}
    for direction in ("pull", "push"):
        recv = poisoned(peers, f"recv_{direction}", (schedule.capacity, hidden))
        plan.dispatch(x, recv, direction)
        got[direction] = recv
    for r in range(ranks):
        real = schedule.src_rank[r] >= 0
        want = torch.empty(schedule.capacity, hidden, dtype=torch.bfloat16, device=DEVICE)
        pull_rows(schedule.rank(r), 0, schedule.capacity, x, want, by_token=True)
        assert torch.equal(bits(got["pull"][r]), bits(got["push"][r])), f"rank {r}: push != pull"
        assert torch.equal(bits(got["pull"][r][real]), bits(want[real])), f"rank {r}: != mok.transfers.pull_rows"
        assert torch.isnan(got["push"][r][~real].float()).all(), "padding rows must not be written"
    assert int((schedule.src_rank >= 0).sum()) == plan.real_rows == ranks * 8 * 2


@pytest.mark.parametrize("ranks,skew", CASES)
def test_combine_push_and_pull_move_the_same_bytes_as_transfers(ranks, skew):
    schedule, plan, peers, _, y = make_case(ranks, skew=skew, seed=1)
    hidden = y.shape[-1]
    slot_shape = (schedule.slots_per_rank, hidden)
    want = poisoned(peers, "want", slot_shape)
    for r in range(ranks):
        push_rows(schedule.rank(r), 0, schedule.capacity, y[r], want)
    for direction in ("pull", "push"):
        slots = poisoned(peers, f"slots_{direction}", slot_shape)
        plan.combine(y, slots, direction)
        for r in range(ranks):
            assert not torch.isnan(slots[r].float()).any(), f"{direction}: a slot was never written"
            assert torch.equal(bits(slots[r]), bits(want[r])), f"{direction} rank {r}: != mok.transfers.push_rows"


@pytest.mark.parametrize("poll", ["atomic", "load"])
@pytest.mark.parametrize("direction", ["pull", "push"])
def test_signalling_counts_every_row_and_keeps_the_data(direction, poll, monkeypatch):
    monkeypatch.setenv("MOK_PUSH_PULL_POLL", poll)  # how the waits poll: acquire atomics or volatile loads
    ranks = 3
    schedule, plan, peers, x, y = make_case(ranks, skew=1.0, seed=2)
    hidden = x.shape[-1]
    plain = poisoned(peers, "plain", (schedule.capacity, hidden))
    plan.dispatch(x, plain, direction)
    signal = push_pull.SignalState.create(ranks, DEVICE)
    signalled = poisoned(peers, "signalled", (schedule.capacity, hidden))
    plan.dispatch(x, signalled, direction, signal=signal)
    plan.dispatch(x, signalled, direction, signal=signal)  # second epoch: counters keep growing, no reset
    signal.check()
    for r in range(ranks):
        assert torch.equal(bits(plain[r]), bits(signalled[r]))
    if direction == "push":
        assert torch.equal(signal.arrivals.cpu(), 2 * schedule.segment_counts.sum(1).to(torch.int64).cpu())
        assert int(signal.ready.sum()) == 0
    else:
        assert signal.ready.tolist() == [2] * ranks and int(signal.arrivals.sum()) == 0

    # Signalling alone moves no data but still completes every wait.
    untouched = poisoned(peers, "untouched", (schedule.capacity, hidden))
    slots_signal = push_pull.SignalState.create(ranks, DEVICE)
    plan.dispatch(x, untouched, direction, signal=slots_signal, move_data=False)
    plan.combine(y, poisoned(peers, "slots", (schedule.slots_per_rank, hidden)), direction,
                 signal=push_pull.SignalState.create(ranks, DEVICE), move_data=False)
    slots_signal.check()
    assert all(torch.isnan(v.float()).all() for v in untouched.views)


def test_one_signal_state_serves_dispatch_and_combine():
    """Dispatch and combine expect different row counts per rank (skewed routing); sharing one state must still
    complete every wait (a target of epoch * expected did not: found on the H200, 2026-11-29)."""
    ranks = 3
    schedule, plan, peers, x, y = make_case(ranks, skew=1.5, seed=4)
    hidden = x.shape[-1]
    signal = push_pull.SignalState.create(ranks, DEVICE)
    plan.dispatch(x, poisoned(peers, "recv", (schedule.capacity, hidden)), "push", signal=signal)
    plan.combine(y, poisoned(peers, "slots", (schedule.slots_per_rank, hidden)), "push", signal=signal)
    signal.check()
    per_expert_rank = schedule.segment_counts.sum(1).to(torch.int64).cpu()
    per_source_rank = torch.full((ranks,), schedule.slots_per_rank, dtype=torch.int64)
    assert not torch.equal(per_expert_rank, per_source_rank), "the case must skew the two transfers apart"
    assert torch.equal(signal.arrivals.cpu(), per_expert_rank + per_source_rank)


def test_transfer_rows_rejects_bad_arguments():
    schedule, plan, peers, x, _ = make_case(2)
    recv = peers.buffer("recv", (schedule.capacity, x.shape[-1]), torch.bfloat16)
    with pytest.raises(ValueError, match="direction"):
        plan.dispatch(x, recv, "sideways")
    other = peers.buffer("other", (schedule.capacity, x.shape[-1]), torch.float32)
    with pytest.raises(TypeError, match="dtype"):
        push_pull.transfer_rows(other, x, plan.expert_rank_table, plan.expert_row_table, direction="pull")
    with pytest.raises(ValueError, match="expected"):
        push_pull.transfer_rows(x, recv, plan.source_rank_table, plan.source_row_table, direction="push",
                                own_div=2, signal=push_pull.SignalState.create(2, DEVICE))
    signal = push_pull.SignalState.create(2, DEVICE)
    with pytest.raises(ValueError, match="poll must be one of"):
        push_pull.transfer_rows(x, recv, plan.expert_rank_table, plan.expert_row_table, direction="pull",
                                signal=signal, poll="spin")
    assert signal.epoch == 0, "a refused call must not advance the epoch every rank counts"


def test_rank_filter_one_launch_per_rank_moves_the_same_bytes():
    """Launching each rank's programs separately (what each GPU does across GPUs) equals the single launch."""
    ranks = 3
    schedule, plan, peers, x, y = make_case(ranks, skew=1.0, seed=5)
    hidden = x.shape[-1]
    per_rank = [push_pull.PushPullPlan(schedule, local_ranks=[r]) for r in range(ranks)]
    for direction in ("pull", "push"):
        one = poisoned(peers, "one", (schedule.capacity, hidden))
        split = poisoned(peers, "split", (schedule.capacity, hidden))
        plan.dispatch(x, one, direction)
        for rank_plan in per_rank:
            rank_plan.dispatch(x, split, direction)
        slots_one = poisoned(peers, "slots_one", (schedule.slots_per_rank, hidden))
        slots_split = poisoned(peers, "slots_split", (schedule.slots_per_rank, hidden))
        plan.combine(y, slots_one, direction)
        for rank_plan in per_rank:
            rank_plan.combine(y, slots_split, direction)
        for r in range(ranks):
            assert torch.equal(bits(one[r]), bits(split[r])), (direction, r)
            assert torch.equal(bits(slots_one[r]), bits(slots_split[r])), (direction, r)
            assert not torch.isnan(slots_split[r].float()).any()
    with pytest.raises(ValueError, match="ranks"):
        push_pull.PushPullPlan(schedule, local_ranks=[ranks]).dispatch(x, one, "pull")
    with pytest.raises(ValueError, match="scope"):
        push_pull.PushPullPlan(schedule, scope="device").dispatch(x, one, "pull")


# Compiled (not interpreted) for sm_90 in a fresh process: the interpreter ignores memory scopes.
_SM90_PTX_SCRIPT = r"""
import itertools, json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mok.triton_ref import push_pull as pp

kernel = pp._transfer_rows_kernel
signature = {"own_ptrs": "*i64", "peer_ptrs": "*i64", "base_ptr": "*bf16", "base_addr": "i64", "ranks_ptr": "*i32",
             "n_ranks": "i32", "peer_rank_ptr": "*i32", "peer_row_ptr": "*i32", "signal_ptrs": "*i64",
             "expected_ptr": "*i64", "epoch": "i32", "N": "i32", "H": "i32", "own_stride": "i32",
             "peer_stride": "i32"}
found = {}
for pull, scope, loads in itertools.product((True, False), ("gpu", "sys"), (False, True)):
        const = dict(R=8, R_POW2=8, OWN_DIV=1, PEER_DIV=8, PULL=pull, SIGNAL=True, MOVE_DATA=True, SCOPE=scope,
                     BLOCK_ROWS=4, BLOCK_COLS=1024, MAX_SPINS=1 << 22, POLL_LOADS=loads)
        sig = {**signature, **{k: "constexpr" for k in const}}
        names = list(sig)
        src = ASTSource(fn=kernel, signature=sig, constexprs={(names.index(k),): v for k, v in const.items()})
        ptx = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": 4}).asm["ptx"]
        found[f"{'pull' if pull else 'push'}/{scope}/{'load' if loads else 'atomic'}"] = sorted(set(re.findall(
            r"(?:atom|red|ld)\.global\.(?:gpu|sys)\.(?:acquire|release)\.[\w.]+|ld\.volatile\.global", ptx)))
print(json.dumps(found))
"""


@pytest.mark.skipif(HAS_CUDA, reason="checks the PTX without a GPU; the GPU tests run the kernels themselves")
def test_signal_atomics_compile_with_the_chosen_scope():
    """Compiled for sm_90: the signalling atomics carry the scope asked for (``.sys`` across GPUs)."""
    import json
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", _SM90_PTX_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=240)
    if proc.returncode != 0 and "ptxas" in proc.stderr:
        pytest.skip(f"no ptxas for sm_90 here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for scope, poll in itertools.product(("gpu", "sys"), ("atomic", "load")):
        other = "sys" if scope == "gpu" else "gpu"
        pull, push = found[f"pull/{scope}/{poll}"], found[f"push/{scope}/{poll}"]
        # pull: "ready" is a release exchange, its polls acquire; push: arrivals are release adds, the
        # receiver's poll an acquire load. Polling with volatile loads still ends each wait with an acquire.
        assert any(f".{scope}.release.exch" in op for op in pull), pull
        assert any(f".{scope}.acquire" in op for op in pull), pull
        assert any(f".{scope}.release.add" in op for op in push), push
        assert any(f".{scope}.acquire" in op for op in push), push
        assert not any(f".{other}." in op for op in pull + push), (scope, pull, push)
        assert ("ld.volatile.global" in pull + push) == (poll == "load"), (scope, poll, pull, push)


# --------------------------------------------------------------------------------------------------------
# Real peers: two CPU processes over host-shared memory, one rank each, signal words in peer memory
# --------------------------------------------------------------------------------------------------------
CROSS = dict(tokens_per_rank=8, hidden=32, experts=6, top_k=2, tile=4, skew=1.5, seed=7)
VARIANTS = ("data", "data+signal", "signal")


def _cross_process_worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), TRITON_INTERPRET="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from mok.comm.symm_mem import HostSharedPeers

    peers = HostSharedPeers()
    schedule, x_all, y_all = routing_case(world, device="cpu", **CROSS)
    plan = push_pull.PushPullPlan(schedule, local_ranks=peers.local_ranks)
    hidden = CROSS["hidden"]
    x = peers.buffer("x", (CROSS["tokens_per_rank"], hidden), torch.bfloat16)
    y = peers.buffer("y", (schedule.capacity, hidden), torch.bfloat16)
    x[rank].copy_(x_all[rank])
    y[rank].copy_(y_all[rank])
    results = {}
    for transfer in ("dispatch", "combine"):
        rows = schedule.capacity if transfer == "dispatch" else schedule.slots_per_rank
        for direction in ("pull", "push"):
            for variant in VARIANTS:
                name = f"{transfer}/{direction}/{variant}"
                signal = push_pull.SignalState.on_peers(peers, f"sig-{name}") if variant != "data" else None
                out = peers.buffer(f"out-{name}", (rows, hidden), torch.bfloat16)
                out[rank].fill_(float("nan"))
                peers.barrier()  # every rank's output is poisoned before anyone writes into it
                for _ in range(2):  # the second call finds counters and flags from the first: no reset
                    if transfer == "dispatch":
                        plan.dispatch(x, out, direction, signal=signal, move_data=variant != "signal")
                    else:
                        plan.combine(y, out, direction, signal=signal, move_data=variant != "signal")
                if signal is None:
                    peers.barrier()  # data only: nothing says when the peers' pushes have landed
                # With signalling, this rank's output is complete when its own launch returns: no barrier.
                results[name] = {"out": out[rank].clone(),
                                 "words": signal.words[rank].clone() if signal is not None else None}
                peers.barrier()  # nobody reuses a buffer a peer still reads
    torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    peers.close()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def cross_process():
    world = 2
    with tempfile.TemporaryDirectory(prefix="mok-push-pull-") as out_dir:
        mp.spawn(_cross_process_worker, args=(world, free_port(), out_dir), nprocs=world, join=True)
        yield world, [torch.load(os.path.join(out_dir, f"rank{r}.pt")) for r in range(world)]


@pytest.mark.skipif(HAS_CUDA, reason="CPU processes under the interpreter; on GPUs see test_distributed_gpu.py")
@pytest.mark.parametrize("transfer", ["dispatch", "combine"])
@pytest.mark.parametrize("direction", ["pull", "push"])
def test_across_processes_each_rank_launching_its_own_programs(cross_process, transfer, direction):
    world, per_rank = cross_process
    schedule, x_all, y_all = routing_case(world, device="cpu", **CROSS)
    peers = EmulatedPeers(world, "cpu")
    x = peers.buffer("x", x_all.shape[1:], torch.bfloat16)
    y = peers.buffer("y", y_all.shape[1:], torch.bfloat16)
    rows = schedule.capacity if transfer == "dispatch" else schedule.slots_per_rank
    want = poisoned(peers, "want", (rows, CROSS["hidden"]))
    for r in range(world):
        x[r].copy_(x_all[r])
        y[r].copy_(y_all[r])
    for r in range(world):
        if transfer == "dispatch":
            pull_rows(schedule.rank(r), 0, schedule.capacity, x, want[r], by_token=True)
            want[r][schedule.src_rank[r] < 0] = float("nan")  # padding rows are never written
        else:
            push_rows(schedule.rank(r), 0, schedule.capacity, y[r], want)
    # Rows each rank receives per call: dispatch, its real table rows; combine, its (token, k) slots.
    received = (schedule.segment_counts.sum(1) if transfer == "dispatch"
                else torch.full((world,), schedule.slots_per_rank)).tolist()
    for r in range(world):
        for variant in VARIANTS:
            got = per_rank[r][f"{transfer}/{direction}/{variant}"]
            if variant == "signal":
                assert torch.isnan(got["out"].float()).all(), f"rank {r}: signalling alone wrote data"
            else:
                assert torch.equal(bits(got["out"]), bits(want[r])), f"rank {r} {variant}: != mok.transfers"
            if variant == "data":
                continue
            arrivals, target, ready, timeouts = got["words"].tolist()
            assert timeouts == 0, f"rank {r} {variant}: {timeouts} waits timed out"
            if direction == "push":
                assert arrivals == target == 2 * received[r], (r, variant, arrivals, target, received[r])
                assert ready == 0
            else:
                assert ready == 2 and arrivals == target == 0, (r, variant, got["words"])


@pytest.mark.gpu
@pytest.mark.parametrize("hidden", [7168, 1000], ids=["H7168", "H1000-unaligned-rows"])
def test_gpu_push_and_pull_agree_at_a_real_size(hidden):
    """The compiled kernels (16-byte vectors, release/acquire atomics) at 8 ranks, Kimi-like routing."""
    ranks, t_local, top_k = 8, 256, 8
    schedule, plan, peers, x, y = make_case(ranks, tokens_per_rank=t_local, hidden=hidden, experts=64, top_k=top_k,
                                            tile=128, skew=0.05, seed=3)
    want_slots = poisoned(peers, "want_slots", (schedule.slots_per_rank, hidden))
    for r in range(ranks):
        push_rows(schedule.rank(r), 0, schedule.capacity, y[r], want_slots)
    for direction in ("pull", "push"):
        for signal in (None, push_pull.SignalState.create(ranks, DEVICE)):
            recv = poisoned(peers, "recv", (schedule.capacity, hidden))
            slots = poisoned(peers, "slots", (schedule.slots_per_rank, hidden))
            plan.dispatch(x, recv, direction, signal=signal)
            plan.combine(y, slots, direction, signal=signal)
            if signal is not None:
                signal.check()
            for r in range(ranks):
                real = schedule.src_rank[r] >= 0
                want = torch.empty(schedule.capacity, hidden, dtype=torch.bfloat16, device=DEVICE)
                pull_rows(schedule.rank(r), 0, schedule.capacity, x, want, by_token=True)
                assert torch.equal(bits(recv[r][real]), bits(want[real])), (direction, signal is not None, r)
                assert torch.isnan(recv[r][~real].float()).all()
                assert torch.equal(bits(slots[r]), bits(want_slots[r])), (direction, signal is not None, r)
