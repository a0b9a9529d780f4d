"""One real rank per launch (mok/cuda/rank_run.py), checked on one GPU.

The launches a multi-GPU run makes (per rank: an expert launch, then, after every rank's, a combine launch)
are made here for R ranks whose buffers all sit on this GPU, reached through the same pointer tables, and must
give bit for bit what one emulated launch of all R ranks gives: output and saved gate/up rows. The
distributed path itself (symmetric memory, barriers) is tested at world size 1 in test_distributed_gpu.py and
across GPUs by experiments/multi_gpu/README.md.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import assert_bitwise_equal

from mok.config import MoKConfig

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HOPPER, reason="the SM90 megakernel needs a Hopper GPU (compute capability 9.x)")]


def _table(stacked: torch.Tensor) -> torch.Tensor:
    return torch.tensor([stacked[r].data_ptr() for r in range(stacked.shape[0])], dtype=torch.int64,
                        device=stacked.device)


def _rank_by_rank(problem, ranks: int, variant: str):
    """Every rank's expert launch, then every rank's combine launch; returns (out [T, H], saved rows per rank)."""
    from mok.cuda.backend import check_error, launch, saved_gate_up_buffer
    from mok.cuda.rank_run import rank_launches
    from mok.cuda.schedule_tables import build_kernel_schedule

    x, ids, weights, w_gate, w_up, w_down = problem
    tokens, hidden = x.shape
    experts, top_k = w_gate.shape[0], ids.shape[1]
    local_tokens, local_experts = tokens // ranks, experts // ranks
    schedule = build_kernel_schedule(ids, experts, ranks, 128)
    xs = x.view(ranks, local_tokens, hidden)
    ws = weights.float().reshape(ranks, local_tokens * top_k).contiguous()
    fuse = top_k == 1
    out = torch.full((ranks, local_tokens, hidden), float("nan"), dtype=torch.bfloat16, device=x.device)
    slots = torch.full((ranks, local_tokens * top_k, hidden), float("nan"), dtype=torch.bfloat16, device=x.device)
    launches = []
    for r in range(ranks):
        own = slice(r * local_experts, (r + 1) * local_experts)
        launches.append(rank_launches(
            schedule, r, x=xs[r], weights=ws[r], out=out[r], x_ptrs=_table(xs), weight_ptrs=_table(ws),
            combine_ptrs=_table(out if fuse else slots), out_ptrs=_table(out), w_gate=w_gate[own], w_up=w_up[own],
            w_down=w_down[own], config=MoKConfig(), fuse_top1=fuse, reuse_workspace=False))
    saved = [saved_gate_up_buffer(experts_launch, poison=True) for experts_launch, _ in launches]
    for (experts_launch, _), rows in zip(launches, saved):
        experts_launch.workspace.poison()
        launch(experts_launch, variant=variant, dispatch="ring", saved_gate_up=rows)
        check_error(experts_launch)
    for _, combine_launch in launches:  # after every expert launch: what the barrier across GPUs guarantees
        launch(combine_launch, variant=variant, dispatch="ring")
        check_error(combine_launch)
    return out.view(tokens, hidden), saved, schedule


@pytest.mark.parametrize("variant", ["simple", "pipelined"])
@pytest.mark.parametrize("top_k", [4, 1], ids=["top4", "top1-fused"])
@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_one_rank_launches_equal_the_emulated_launch_bitwise(ranks, top_k, variant):
    from mok.cuda.backend import sm90_forward
    from mok.cuda.sanitize_check import make_inputs

    problem = make_inputs(512, 256, 192, 16, top_k, seed=ranks + 10 * top_k, skew=1.0)
    want, want_saved = sm90_forward(*problem, ep_size=ranks, variant=variant, check=True, poison=True,
                                    dispatch="ring", save_gate_up=True)
    got, saved, schedule = _rank_by_rank(problem, ranks, variant)
    assert bool(torch.isfinite(got).all()), "an output element was never written"
    assert_bitwise_equal(got, want, f"R={ranks} one rank per launch vs one emulated launch")
    capacity = schedule.capacity
    for r, rows in enumerate(saved):
        used = int(schedule.segment_offsets[r, -1])
        assert_bitwise_equal(rows[:used], want_saved[r * capacity:r * capacity + used], f"saved rows of rank {r}")


def test_experts_and_combine_in_one_launch_are_refused_for_several_real_ranks():
    from mok.cuda.backend import launch
    from mok.cuda.rank_run import rank_launches
    from mok.cuda.sanitize_check import make_inputs
    from mok.cuda.schedule_tables import build_kernel_schedule

    x, ids, weights, w_gate, w_up, w_down = make_inputs(256, 128, 128, 8, 2, seed=1)
    schedule = build_kernel_schedule(ids, 8, 2, 128)
    xs, ws = x.view(2, 128, 128), weights.float().reshape(2, 256).contiguous()
    out = torch.empty_like(xs)
    slots = torch.empty(2, 256, 128, dtype=torch.bfloat16, device=x.device)
    experts, _ = rank_launches(schedule, 0, x=xs[0], weights=ws[0], out=out[0], x_ptrs=_table(xs),
                               weight_ptrs=_table(ws), combine_ptrs=_table(slots), out_ptrs=_table(out),
                               w_gate=w_gate[:4], w_up=w_up[:4], w_down=w_down[:4], config=MoKConfig(),
                               fuse_top1=False, reuse_workspace=False)
    with pytest.raises(RuntimeError, match="separate launches"):
        launch(dataclasses.replace(experts, phases=3))
