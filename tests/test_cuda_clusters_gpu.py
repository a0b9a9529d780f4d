"""GPU tests of the megakernel in 2-CTA clusters (``launch(clusters=True)``, ``MOK_CUDA_CLUSTERS``; Hopper only).

In clusters the pairs of gate/up row tiles of one expert and column block load their weight tile once, each CTA half
of it multicast to both, and a pair scheduler in each cluster's first CTA hands both CTAs their tasks
(include/mok/cluster_pairs.cuh). The arithmetic of every tile is unchanged, so every output and saved gate/up row must
be the same bits as without clusters, whatever the EP degree, ring, CTA count or precision; and every task must run
once (the task timeline). The order's padding and pairing are checked on the host (tests/test_cuda_compile.py,
test_task_order_in_cluster_units).
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

# name: (T, H, I, E, K, skew). Experts of several row tiles (so that most gate/up units are pairs), a ragged expert
# end in every band, an odd tile count per step, padding halves, and the small shapes' edge cases.
SHAPES = {
    "pairs": (2048, 512, 256, 4, 2, 0.0),          # ~8 tiles per expert: whole bands of pairs
    "ragged-pairs": (1000, 320, 192, 6, 3, 0.5),   # H % 256 != 0, I % 128 == 64, experts ending mid-band
    "one-hot-expert": (1024, 256, 256, 8, 1, 30.0),  # top-1, (almost) every row on expert 0: long runs of pairs
    "empty-experts": (512, 256, 128, 16, 2, 4.0),  # many experts without rows, few pairs
    "tiny": (128, 64, 64, 4, 1, 0.0),              # one tile: nothing to pair
}


def cases(tokens: int, experts: int):
    """(EP degree, config, CTA count): EP 1/2/4 with the default ring, rings of 2-tile and 4-tile minibatches (a step's
    odd last tile, a band of 2), and 2, 4 or all CTAs (one cluster: every task on one pair of SMs)."""
    two, four = MoKConfig(minibatch_rows=256, ring_rows=512), MoKConfig(minibatch_rows=512, ring_rows=512)
    for ep_size, config, num_ctas in ((1, None, 0), (2, two, 2), (4, four, 4), (2, None, 0), (1, four, 2)):
        if tokens % ep_size == 0 and experts % ep_size == 0:
            yield ep_size, config, num_ctas


@pytest.mark.parametrize("precision", ["bf16", "mxfp8"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_clusters_change_no_bit(name, precision):
    from mok.cuda.backend import check_error, launch, prepare, saved_gate_up_buffer
    from mok.cuda.sanitize_check import make_inputs
    if precision == "mxfp8" and name == "tiny":
        pytest.skip("MXFP8 needs H of at least 128 (its packed rows' scales)")
    t, h, i, e, k, skew = SHAPES[name]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=900 + list(SHAPES).index(name))
    for ep_size, config, num_ctas in cases(t, e):
        prep = prepare(*problem, ep_size=ep_size, config=config, poison=True, precision=precision)
        runs = {}
        for clusters in (False, True):
            prep.out.fill_(float("nan"))
            prep.workspace.poison()
            saved = saved_gate_up_buffer(prep, poison=True)
            out = launch(prep, variant="pipelined", dispatch="ring", num_ctas=num_ctas, saved_gate_up=saved,
                         clusters=clusters).clone()
            check_error(prep)
            runs[clusters] = (out, saved)
        what = f"clusters {name} {precision} ep={ep_size} ring={config} ctas={num_ctas}"
        assert_bitwise_equal(runs[True][0], runs[False][0], what + " (output)")
        assert_bitwise_equal(runs[True][1], runs[False][1], what + " (saved gate/up rows)")
        assert bool(torch.isfinite(runs[True][0]).all()), what
    if precision == "bf16":
        with torch.no_grad():
            ref = mok.moe(*problem, backend="reference", check_inputs=False)
        assert rel_err(runs[True][0], ref) < 1e-2


def test_clusters_repeat_bitwise_and_record_every_task_once():
    """Five launches in clusters give the same bits; the task timeline holds every task once (the padding tickets
    none), each on a CTA of the grid, its marks in order."""
    from mok.cuda.backend import TASK_KINDS, TRACE_FIELDS, check_error, launch, prepare, trace_buffer
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k, skew = SHAPES["ragged-pairs"]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=950)
    prep = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=384, ring_rows=768), poison=True)
    options = dict(variant="pipelined", dispatch="ring", clusters=True, first_dispatch_parts=3)
    first = launch(prep, **options).clone()
    check_error(prep)
    for _ in range(4):
        prep.out.fill_(float("nan"))
        assert_bitwise_equal(launch(prep, **options), first, "repeated launch in clusters")
        check_error(prep)
    trace = trace_buffer(prep)
    prep.out.fill_(float("nan"))
    assert_bitwise_equal(launch(prep, **options, trace=trace), first, "traced launch in clusters")
    check_error(prep)
    rows = trace.cpu()
    claimed, ready, start, done, who = (TRACE_FIELDS.index(f) for f in ("claimed", "ready", "start", "done", "who"))
    rows = rows[rows[:, who] >= 0]
    assert bool((rows[:, :who] > 0).all()), "a recorded task misses a time"
    assert bool((rows[:, claimed] <= rows[:, ready]).all() and (rows[:, ready] <= rows[:, start]).all()
                and (rows[:, start] <= rows[:, done]).all())
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert int((rows[:, who] >> 8).max()) < num_sms - num_sms % 2
    kinds = rows[:, who] & 0xFF
    counts = {kind: int((kinds == code).sum()) for code, kind in TASK_KINDS.items()}
    tiles = int(prep.schedule.segment_offsets[:, -1].sum()) // 128
    hidden, intermediate = prep.w_gate.shape[2], prep.w_gate.shape[1]
    assert counts["gate_up"] == tiles * -(-intermediate // 128)
    assert counts["down"] >= tiles and counts["down"] % tiles == 0, counts  # down_span blocks per task, every tile
    assert counts["dispatch"] >= tiles, counts  # the first minibatch's tiles in 3 parts
    assert sum(counts.values()) == len(rows)


def test_clusters_through_the_environment_and_refusals(monkeypatch):
    """MOK_CUDA_CLUSTERS=1 runs clusters where they are allowed and the plain kernel elsewhere (gather mode, the simple
    variant); clusters=True where they are not allowed is a ValueError."""
    from mok.cuda.backend import check_error, launch, prepare
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k, skew = SHAPES["pairs"]
    problem = make_inputs(t, h, i, e, k, skew=skew, seed=960)
    prep = prepare(*problem, ep_size=1, poison=True)
    plain = launch(prep, variant="pipelined", dispatch="ring", clusters=False).clone()
    check_error(prep)
    monkeypatch.setenv("MOK_CUDA_CLUSTERS", "1")
    for variant, dispatch in (("pipelined", "ring"), ("pipelined", "gather"), ("simple", "ring")):
        prep.out.fill_(float("nan"))
        assert_bitwise_equal(launch(prep, variant=variant, dispatch=dispatch), plain, f"{variant} {dispatch}")
        check_error(prep)
    for options in (dict(dispatch="gather"), dict(variant="simple"), dict(signal_warp=False)):
        with pytest.raises(ValueError, match="clusters=True"):
            launch(prep, clusters=True, **{"variant": "pipelined", "dispatch": "ring", **options})
