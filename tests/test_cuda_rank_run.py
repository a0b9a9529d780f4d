"""CPU checks of the megakernel's one-rank-per-GPU path (mok/cuda/rank_run.py): clear errors on bad use, and the
distributed entry points offering it only where it can run. The launches themselves are GPU tests
(test_cuda_rank_run_gpu.py, test_distributed_gpu.py)."""

from __future__ import annotations

import pytest
import torch

from mok.config import MoKConfig
from mok.cuda.backend import saved_gate_up_buffer
from mok.cuda.rank_run import CudaRankRun


def _args(device="cpu"):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 64, generator=gen).to(device, torch.bfloat16)
    ids = torch.stack([torch.randperm(4, generator=gen)[:2] for _ in range(16)]).to(device, torch.int32)
    weights = torch.rand(8, 2, generator=gen).to(device)
    w_gate = torch.randn(2, 64, 64, generator=gen).to(device, torch.bfloat16)
    return x, ids, weights, w_gate, w_gate.clone(), w_gate.clone()


def test_the_kernel_reads_peer_memory_itself_so_only_the_peers_transport_is_accepted():
    with pytest.raises(ValueError, match="transport must be 'peers'"):
        CudaRankRun(*_args(), rank=0, world=2, num_experts=4, config=MoKConfig(), transport="collective")
    assert CudaRankRun.TRANSPORTS == ("peers",)


def test_cpu_tensors_get_a_clear_error():
    with pytest.raises(ValueError, match="needs CUDA tensors"):
        CudaRankRun(*_args(), rank=0, world=2, num_experts=4, config=MoKConfig())


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only answer")
def test_distributed_backend_cuda_is_refused_without_a_gpu():
    from mok.distributed import BACKENDS, _rank_run_class

    assert "cuda" in BACKENDS
    with pytest.raises(RuntimeError, match="Hopper GPU"):
        _rank_run_class("cuda")


def test_a_one_rank_launch_saves_its_own_table_rows_only():
    """The binding wants saved gate/up rows ``[own_ranks * capacity, 2I]``: every rank's when emulated, one
    rank's table when the launch is one real rank's (what TritonRankRun.backward_without_forward reads)."""
    from types import SimpleNamespace

    ranks, capacity, intermediate = 4, 256, 64
    schedule = SimpleNamespace(src_rank=torch.zeros(ranks, capacity, dtype=torch.int32))
    launch = SimpleNamespace(schedule=schedule, w_gate=torch.empty(2, intermediate, 8), out=torch.empty(1),
                             local_rank=-1)
    assert saved_gate_up_buffer(launch).shape == (ranks * capacity, 2 * intermediate)
    rows = saved_gate_up_buffer(SimpleNamespace(**{**vars(launch), "local_rank": 2}), poison=True)
    assert rows.shape == (capacity, 2 * intermediate) and rows.dtype == torch.bfloat16
    assert bool(torch.isnan(rows.float()).all())


def test_phase_constants_mirror_the_kernels_enum():
    """rank_run's phase numbers are the kernel's RankPhases (include/mok/workspace.cuh)."""
    import re
    from pathlib import Path

    from mok.cuda import rank_run

    header = (Path(rank_run.__file__).parent / "include/mok/workspace.cuh").read_text()
    enum = dict(re.findall(r"(kPhase\w+) = (\d+)", header.split("enum RankPhases", 1)[1].split("};", 1)[0]))
    assert int(enum["kPhaseExperts"]) == rank_run.PHASE_EXPERTS
    assert int(enum["kPhaseCombine"]) == rank_run.PHASE_COMBINE
