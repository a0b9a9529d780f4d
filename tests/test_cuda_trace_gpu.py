"""GPU tests of the megakernel's task timeline (``launch(trace=...)``, ``include/mok/trace.cuh``); Hopper only.

Recording the timeline changes no bit of the output; every task of the launch is recorded exactly once (the task
counts per kind follow from the schedule tables, worked out here independently of the kernel's task order), its
times are in the order the kernel reaches them (claimed <= ready <= start <= done), the CTA ids are the launch's,
and no ticket beyond the last task is written. Both variants, both dispatch modes, with and without the signal
warp, EP 1 and 4, top-k 2 and fused top-1.
"""

from __future__ import annotations

import pytest
import torch
from conftest import assert_bitwise_equal

from mok.config import MoKConfig

HOPPER = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not HOPPER, reason="the SM90 megakernel needs a Hopper GPU (compute capability 9.x)")]

# name: (tokens, hidden, intermediate, experts, top_k)
CASES = {"top2": (600, 256, 384, 8, 2), "top1": (1000, 512, 256, 16, 1)}


def expected_task_counts(prep, dispatch: str, first_dispatch_parts: int = 1, **launch_options) -> dict[str, int]:
    """Tasks per kind of one launch, from the tables: every used tile has a dispatch task (ring mode; a tile of the
    first minibatch ``first_dispatch_parts`` of them), its gate/up column blocks (I / 128) and its down tasks (H / 256
    column blocks, the launch's default span of them per task); every rank has ceil(T_local / 16) combine blocks
    unless the down epilogue writes the output itself (fused top-1) or the sum kernel sums after the launch."""
    from mok.cuda.backend import resolve_down_path
    from mok.cuda.schedule_tables import COMBINE_BLOCK_TOKENS
    from mok.cuda.workspace import DOWN_COLUMNS, GATE_UP_COLUMNS
    tiles = prep.schedule.padding_half_tiles()[0]  # used tiles over every rank
    per_minibatch = prep.minibatch_rows // 128
    first_tiles = sum(min(int(n) // 128, per_minibatch) for n in prep.schedule.segment_offsets[:, -1].tolist())
    intermediate, hidden = prep.w_gate.shape[1], prep.w_gate.shape[2]
    _, span, sum_kernel = resolve_down_path(prep, dispatch, launch_options.get("down_tma"),
                                            launch_options.get("down_span"), launch_options.get("sum_kernel"))
    return {"dispatch": tiles + first_tiles * (first_dispatch_parts - 1) if dispatch == "ring" else 0,
            "gate_up": tiles * -(-intermediate // GATE_UP_COLUMNS),
            "down": tiles * -(-hidden // DOWN_COLUMNS) // span,
            "combine": 0 if prep.fuse_top1 or sum_kernel else
            prep.schedule.ep_size * -(-prep.tokens_per_rank // COMBINE_BLOCK_TOKENS)}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("variant", ["simple", "pipelined"])
def test_trace_changes_no_bit_and_records_every_task_once(name, variant):
    from mok.cuda.backend import TASK_KINDS, TRACE_FIELDS, check_error, launch, prepare, trace_buffer
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k = CASES[name]
    problem = make_inputs(t, h, i, e, k, seed=700 + list(CASES).index(name))
    claimed, ready, start, done, who, data_in, mainloop_done = (
        TRACE_FIELDS.index(f) for f in ("claimed", "ready", "start", "done", "who", "data_in", "mainloop_done"))
    gemm_kinds = [code for code, kind in TASK_KINDS.items() if kind in ("gate_up", "down")]
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count
    for ep_size in (1, 4):
        prep = prepare(*problem, ep_size=ep_size, config=MoKConfig(minibatch_rows=128), poison=True)
        for dispatch in ("ring", "gather"):
            for signal_warp in ((True, False) if variant == "pipelined" and dispatch == "ring" else (False,)):
                what = f"{name} {variant} ep={ep_size} {dispatch} signal_warp={signal_warp}"
                prep.out.fill_(float("nan"))
                # The first minibatch's dispatch in 3 tasks per tile (the default gives every CTA one: 132 / R here).
                options = dict(variant=variant, dispatch=dispatch, signal_warp=signal_warp, first_dispatch_parts=3)
                plain = launch(prep, **options).clone()
                check_error(prep)
                trace = trace_buffer(prep)
                prep.out.fill_(float("nan"))
                traced = launch(prep, **options, trace=trace).clone()
                check_error(prep)
                assert_bitwise_equal(traced, plain, what)

                rows = trace.cpu()
                recorded = rows[:, who] >= 0
                n = int(recorded.sum())
                assert bool(recorded[:n].all()) and not bool(recorded[n:].any()), f"{what}: tickets not 0..n-1"
                assert bool((rows[n:] == -1).all()), f"{what}: a ticket past the last task was written"
                rows = rows[:n]
                assert bool((rows[:, :who] > 0).all()), f"{what}: a recorded task misses a time"  # the first four
                assert bool((rows[:, claimed] <= rows[:, ready]).all()), what
                assert bool((rows[:, ready] <= rows[:, start]).all()), what
                assert bool((rows[:, start] <= rows[:, done]).all()), what
                # GEMM tasks: start <= first K block in <= mainloop done <= done; the other kinds have neither mark.
                gemm = torch.isin(rows[:, who] & 0xFF, torch.tensor(gemm_kinds))
                g = rows[gemm]
                assert bool((g[:, start] <= g[:, data_in]).all()), f"{what}: a K block before the task's start"
                assert bool((g[:, data_in] <= g[:, mainloop_done]).all()), what
                assert bool((g[:, mainloop_done] <= g[:, done]).all()), what
                assert bool((rows[~gemm][:, [data_in, mainloop_done]] == -1).all()), f"{what}: a non-GEMM mainloop mark"
                ctas = rows[:, who] >> 8
                assert int(ctas.min()) >= 0 and int(ctas.max()) < num_sms, what
                kinds = rows[:, who] & 0xFF
                counts = {kind: int((kinds == code).sum()) for code, kind in TASK_KINDS.items()}
                assert counts == expected_task_counts(prep, dispatch, first_dispatch_parts=3), what
                assert sum(counts.values()) == n, f"{what}: an unknown task kind"


@pytest.mark.parametrize("dispatch", ["ring", "gather"])
def test_trace_with_the_sum_kernel_has_no_combine_tasks(dispatch):
    """With the weighted sum in its own kernel (down_tma, sum_kernel) the launch's timeline holds the dispatch, gate/up
    and down tasks and no combine task, each once, and the output is the combine tasks' bits."""
    from mok.cuda.backend import TASK_KINDS, TRACE_FIELDS, check_error, launch, prepare, trace_buffer
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k = CASES["top2"]
    problem = make_inputs(t, h, i, e, k, seed=760)
    prep = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=128), poison=True)
    who = TRACE_FIELDS.index("who")
    options = dict(variant="pipelined", dispatch=dispatch, down_tma=True, first_dispatch_parts=3)
    prep.out.fill_(float("nan"))
    tasks = launch(prep, **options, sum_kernel=False).clone()
    check_error(prep)
    trace = trace_buffer(prep)
    prep.out.fill_(float("nan"))
    summed = launch(prep, **options, sum_kernel=True, trace=trace).clone()
    check_error(prep)
    assert_bitwise_equal(summed, tasks, f"sum kernel {dispatch}")
    rows = trace.cpu()
    kinds = rows[rows[:, who] >= 0, who] & 0xFF
    counts = {kind: int((kinds == code).sum()) for code, kind in TASK_KINDS.items()}
    expected = expected_task_counts(prep, dispatch, first_dispatch_parts=3, down_tma=True, sum_kernel=True)
    assert expected["combine"] == 0 and counts == expected, f"{dispatch}: {counts} against {expected}"


@pytest.mark.parametrize("variant", ["simple", "pipelined"])
def test_trace_never_writes_past_the_tickets_it_is_given(variant):
    """A timeline buffer with fewer rows than the launch has tasks (a view of the first rows of a larger one): the
    kernel records exactly those tickets and writes nothing past them, and the output is the same bits."""
    from mok.cuda.backend import TRACE_FIELDS, check_error, launch, prepare, trace_buffer
    from mok.cuda.sanitize_check import make_inputs
    t, h, i, e, k = CASES["top2"]
    problem = make_inputs(t, h, i, e, k, seed=750)
    prep = prepare(*problem, ep_size=2, config=MoKConfig(minibatch_rows=128), poison=True)
    prep.out.fill_(float("nan"))
    plain = launch(prep, variant=variant, dispatch="ring", first_dispatch_parts=1).clone()
    check_error(prep)
    tasks = sum(expected_task_counts(prep, "ring").values())
    given = tasks // 2
    timeline = trace_buffer(prep)
    prep.out.fill_(float("nan"))
    traced = launch(prep, variant=variant, dispatch="ring", first_dispatch_parts=1, trace=timeline[:given]).clone()
    check_error(prep)
    assert_bitwise_equal(traced, plain, f"{variant}: a short trace buffer")
    rows = timeline.cpu()
    who = TRACE_FIELDS.index("who")  # the fields every task has (the mainloop marks are GEMM tasks' only)
    assert bool((rows[:given, :who + 1] >= 0).all()), "a ticket inside the given rows was not recorded"
    assert bool((rows[given:] == -1).all()), "the kernel wrote past the trace rows it was given"
