"""GPU tests of the spread-dispatch task order (``launch(spread_dispatch=True)``, ``MOK_CUDA_SPREAD_DISPATCH``; Hopper).

With spread dispatch each step's dispatch tasks for the next minibatch lie among the step's gate/up tasks in one group
of the task order (include/mok/scheduler.cuh, decode_spread) instead of in a group of their own after them. The tasks
and their arithmetic are unchanged, so every output and saved gate/up row must be the same bits as the plain order's,
alone or in 2-CTA clusters, whatever the EP degree, ring or CTA count (with 2 CTAs, one cluster, a dependency on a
later ticket would hang the launch, which the bounded waits report as an error). The order itself (every dependency
backwards, the dispatches evenly spread) is checked on the host (tests/test_cuda_compile.py, test_task_order_*).
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_bitwise_equal, rel_err

import mok
from mok.config import MoKConfig

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HOPPER, reason="the SM90 megakernel needs a Hopper GPU (compute capability 9.x)")]

# name: (T, H, I, E, K, skew). Several minibatches per rank at the rings below, ragged sizes, skew and top-1.
SHAPES = {
    "basic": (1024, 256, 256, 8, 2, 0.0),
    "ragged": (1000, 320, 192, 6, 3, 0.5),         # H % 256 != 0, I % 128 == 64, experts ending mid-minibatch
    "empty-experts": (512, 256, 128, 16, 2, 4.0),  # many experts without rows
    "one-hot-expert": (1024, 256, 256, 8, 1, 30.0),  # top-1, (almost) every row on expert 0
}

TWO_ONE_TILE = MoKConfig(minibatch_rows=128, ring_rows=256)     # a dispatch every few gate/up tasks
THREE_TWO_TILE = MoKConfig(minibatch_rows=256, ring_rows=768)
TWO_FOUR_TILE = MoKConfig(minibatch_rows=512, ring_rows=1024)   # whole bands of gate/up tiles between dispatches


def cases(tokens: int, experts: int):
    """(EP degree, config, CTA count): EP 1/2/4 with rings of 2 or 3 minibatches of 1, 2 or 4 tiles, and all CTAs, 4
    or 2 (one cluster: every task on one pair of SMs); skips EP degrees that do not divide T and E."""
    for ep_size, config, num_ctas in ((1, TWO_ONE_TILE, 0), (2, THREE_TWO_TILE, 0), (4, TWO_FOUR_TILE, 4),
                                      (2, TWO_ONE_TILE, 2), (1, TWO_FOUR_TILE, 0)):
        if tokens % ep_size == 0 and experts % ep_size == 0:
            yield ep_size, config, num_ctas


def run_forward(prep, num_ctas: int, **options):
    """One poisoned launch in ring mode: (output, saved gate/up rows)."""
    from mok.cuda.backend import check_error, launch, saved_gate_up_buffer
    prep.out.fill_(float("nan"))
    prep.workspace.poison()
    saved = saved_gate_up_buffer(prep, poison=True)
    out = launch(prep, variant="pipelined", dispatch="ring", num_ctas=num_ctas, saved_gate_up=saved, **options).clone()
    check_error(prep)
    return out, saved


@pytest.mark.parametrize("precision", ["bf16", "mxfp8"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_spread_dispatch_changes_no_bit(name, precision):
    """Spread dispatch, alone and in clusters, gives the plain order's bits (outputs and saved gate/up rows)."""
    from mok.cuda.backend import prepare
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k, skew = SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=1200 + list(SHAPES).index(name))
    for ep_size, config, num_ctas in cases(t, e):
        prep = prepare(*problem, ep_size=ep_size, config=config, poison=True, precision=precision)
        plain = run_forward(prep, num_ctas)
        for clusters in (False, True):
            spread = run_forward(prep, num_ctas, spread_dispatch=True, clusters=clusters)
            what = f"spread {name} {precision} clusters={clusters} ep={ep_size} ring={config} ctas={num_ctas}"
            assert_bitwise_equal(spread[0], plain[0], what + " (output)")
            assert_bitwise_equal(spread[1], plain[1], what + " (saved gate/up rows)")
        assert bool(torch.isfinite(plain[0]).all()), name
    if precision == "bf16":
        with torch.no_grad():
            ref = mok.moe(*problem, backend="reference", check_inputs=False)
        assert rel_err(plain[0], ref) < 1e-2


@pytest.mark.parametrize("clusters", [False, True], ids=["alone", "clusters"])
def test_spread_dispatch_runs_the_next_copies_among_the_gate_up_tasks(clusters):
    """In the task timeline, every task runs once either way, and with spread dispatch the first dispatch of
    minibatch 1 was claimed before the last gate/up task of minibatch 0 (in the plain order: after all of them)."""
    from mok.cuda.backend import TASK_KINDS, TRACE_FIELDS, check_error, launch, prepare, trace_buffer
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k, skew = SHAPES["basic"]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=1210)
    prep = prepare(*problem, ep_size=1, config=TWO_FOUR_TILE, poison=True)
    who = TRACE_FIELDS.index("who")
    orders = {}
    for spread in (False, True):
        trace = trace_buffer(prep)
        launch(prep, variant="pipelined", dispatch="ring", trace=trace, spread_dispatch=spread, clusters=clusters)
        check_error(prep)
        rows = trace.cpu()
        orders[spread] = [TASK_KINDS[int(v) & 0xFF] for v in rows[rows[:, who] >= 0, who]]
    assert sorted(orders[True]) == sorted(orders[False])
    for spread, kinds in orders.items():
        # Ticket order: D(0) (in parts), then G(0) with or without D(1) among it.
        first_gate_up = kinds.index("gate_up")
        next_dispatch = kinds.index("dispatch", first_gate_up)
        gate_up_tasks_of_step_0 = (TWO_FOUR_TILE.minibatch_rows // 128) * -(-i // 128)
        last_gate_up_of_step_0 = [j for j, kind in enumerate(kinds) if kind == "gate_up"][gate_up_tasks_of_step_0 - 1]
        assert (next_dispatch < last_gate_up_of_step_0) == spread, (spread, kinds[:40])


def test_spread_dispatch_refuses_a_ring_of_one_minibatch(monkeypatch):
    """A ring of one minibatch (of several), where D(s + 1) would wait for G(s) in its own group, is refused when asked
    for and runs the plain order under MOK_CUDA_SPREAD_DISPATCH=1; gather mode has no dispatch tasks to spread."""
    from mok.cuda.backend import check_error, launch, prepare
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k, skew = SHAPES["basic"]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=1220)
    one = prepare(*problem, ep_size=1, config=MoKConfig(minibatch_rows=128, ring_rows=128), poison=True)
    with pytest.raises(ValueError, match="spread_dispatch=True"):
        launch(one, dispatch="ring", spread_dispatch=True)
    monkeypatch.setenv("MOK_CUDA_SPREAD_DISPATCH", "1")
    for dispatch in ("ring", "gather"):
        launch(one, variant="pipelined", dispatch=dispatch)  # the plain order
        check_error(one)
