"""CPU checks of experiments/task_timeline.py's reading of a megakernel task timeline, on a trace made by hand, and
of the trace's columns and task kinds against the kernel's headers."""

import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))
import task_timeline  # noqa: E402


def who(cta: int, kind: int) -> int:
    return cta << 8 | kind


# Two CTAs, times in ns from 1,000,000: claimed, ready, start, done, who, data_in, mainloop_done. CTA 0 runs a
# gate/up task (start 10 us, first K block at 12, mainloop done at 35), then a down task (start 40 us, 41, 46, done
# 50 us); CTA 1 a gate/up task that waited 5 us for its dependencies and that its consumers waited for (start =
# ready), first K block at 8, mainloop done at 25, done at 30 us; the launch ends at 50 us, so CTA 1 idles 20 us at
# the end.
BASE = 1_000_000
ROWS = np.array([
    [BASE + 0, BASE + 1_000, BASE + 10_000, BASE + 39_000, who(0, 2), BASE + 12_000, BASE + 35_000],
    [BASE + 2_000, BASE + 7_000, BASE + 7_000, BASE + 30_000, who(1, 2), BASE + 8_000, BASE + 25_000],
    [BASE + 9_000, BASE + 9_500, BASE + 40_000, BASE + 50_000, who(0, 3), BASE + 41_000, BASE + 46_000],
    [-1, -1, -1, -1, -1, -1, -1],
], dtype=np.int64)


def test_load_trace_takes_the_recorded_prefix_in_microseconds():
    tl = task_timeline.load_trace(ROWS)
    assert list(tl["kind"]) == ["gate_up", "gate_up", "down"]
    assert list(tl["cta"]) == [0, 1, 0]
    assert tl["start"].tolist() == [10.0, 7.0, 40.0]
    assert tl["data_in"].tolist() == [12.0, 8.0, 41.0]
    assert tl["mainloop_done"].tolist() == [35.0, 25.0, 46.0]
    with pytest.raises(ValueError, match="0..n-1"):
        task_timeline.load_trace(ROWS[[0, 3, 1]])  # a gap before a recorded ticket
    # In clusters a padding ticket is such a gap, and the tasks around it are what counts.
    padded = task_timeline.load_trace(ROWS[[0, 3, 1, 2]], padded=True)
    assert list(padded["kind"]) == ["gate_up", "gate_up", "down"] and padded["start"].tolist() == [10.0, 7.0, 40.0]


def test_consumer_time_splits_each_ctas_time_among_its_tasks():
    tl = task_timeline.load_trace(ROWS)
    # CTA 0: 10 -> 40 (gate/up), 40 -> 50 (down, its last: to its signal); CTA 1: 7 -> 30.
    assert task_timeline.consumer_time(tl).tolist() == [30.0, 23.0, 10.0]


def test_summary_shares_rates_waits_and_tail():
    tl = task_timeline.load_trace(ROWS)
    s = task_timeline.summarize(tl, {"gate_up": 1e6, "down": 2e6}, num_sms=2)
    assert s["span_us"] == 50.0 and s["ctas"] == 2
    total = 100.0  # 2 CTAs x 50 us
    assert s["kinds"]["gate_up"]["share"] == pytest.approx(53.0 / total)
    assert s["kinds"]["down"]["share"] == pytest.approx(10.0 / total)
    assert s["head_share"] == pytest.approx((10.0 + 7.0) / total)
    assert s["tail_share"] == pytest.approx((0.0 + 20.0) / total)
    assert s["tail_us_max"] == 20.0
    # gate/up: 1 MFLOP per task over a mean 26.5 us, on 2 SMs; down: 2 MFLOP over 10 us.
    assert s["kinds"]["gate_up"]["chip_tflops"] == pytest.approx(1e6 / 26.5e-6 / 1e12 * 2)
    assert s["kinds"]["down"]["chip_tflops"] == pytest.approx(2e6 / 10e-6 / 1e12 * 2)
    assert s["kinds"]["gate_up"]["dependency_wait_us"] == pytest.approx((1.0 + 5.0) / 2)
    assert s["kinds"]["gate_up"]["waited_for"] == pytest.approx(0.5)  # CTA 1's started the moment it was ready
    # The GEMM tasks' consumer time split: gate/up waited (2 + 1) / 2 us for data, multiplied (23 + 17) / 2 and
    # spent 5 and 5 us after (consumer times 30 and 23 less 2 + 23 and 1 + 17); down 1, 5 and 4. Gate/up was
    # claimed 10 and 5 us before the consumers took it, down 31.
    gate_up, down = s["kinds"]["gate_up"], s["kinds"]["down"]
    assert (gate_up["data_wait_us"], gate_up["mainloop_us"], gate_up["epilogue_us"]) == pytest.approx((1.5, 20.0, 5.0))
    assert (down["data_wait_us"], down["mainloop_us"], down["epilogue_us"]) == pytest.approx((1.0, 5.0, 4.0))
    assert gate_up["mainloop_tflops"] == pytest.approx(1e6 / 20e-6 / 1e12 * 2)
    assert gate_up["claim_lead_us"] == pytest.approx(7.5)
    assert down["claim_lead_us"] == pytest.approx(31.0)
    text = task_timeline.format_summary("hand-made", "ring", s)
    assert "gate_up" in text and "down" in text and "wait data us" in text
    fig = task_timeline.plot(tl, s, "hand-made", ctas_shown=2)
    assert len(fig.axes) == 2 and len(fig.axes[0].collections) == 3  # CTA 0: gate/up and down bars, CTA 1: gate/up


# Times in us from BASE: CTA 0 runs a dispatch task, a gate/up task and a combine task; CTA 1 a gate/up task whose
# two GEMM marks are missing (-1). Columns as in ROWS.
MIXED_US = [
    [0, 0.5, 1, 4, who(0, 1), -1, -1],    # dispatch
    [1, 2, 3, 13, who(1, 2), -1, -1],     # gate/up without its marks
    [2, 4, 5, 18, who(0, 2), 6, 15],      # gate/up
    [10, 19, 20, 24, who(0, 4), -1, -1],  # combine
]


def test_split_is_for_gemm_kinds_and_skips_missing_marks():
    rows = np.array([[v if c == 4 or v < 0 else BASE + int(v * 1000) for c, v in enumerate(r)] for r in MIXED_US],
                    dtype=np.int64)
    tl = task_timeline.load_trace(rows)
    assert np.isnan(tl["data_in"][[0, 1, 3]]).all() and np.isnan(tl["mainloop_done"][[0, 1, 3]]).all()
    assert tl["data_in"][2] == 6.0 and tl["mainloop_done"][2] == 15.0
    s = task_timeline.summarize(tl, {"gate_up": 1e6, "down": 2e6}, num_sms=2)
    for kind in ("dispatch", "combine"):  # no FLOPs, no split, but a claim lead
        assert not {"data_wait_us", "mainloop_us", "epilogue_us", "mainloop_tflops"} & set(s["kinds"][kind]), kind
    assert s["kinds"]["dispatch"]["claim_lead_us"] == pytest.approx(1.0)
    assert s["kinds"]["combine"]["claim_lead_us"] == pytest.approx(10.0)
    # Gate/up: only the CTA 0 task has its marks: 1 us waiting for data, 9 in the mainloop, 15 - 1 - 9 after (its
    # consumer time runs to the combine's start at 20). The claim lead counts both tasks: (3 + 2) / 2.
    gate_up = s["kinds"]["gate_up"]
    assert (gate_up["data_wait_us"], gate_up["mainloop_us"], gate_up["epilogue_us"]) == pytest.approx((1.0, 9.0, 5.0))
    assert gate_up["mainloop_tflops"] == pytest.approx(1e6 / 9e-6 / 1e12 * 2)
    assert gate_up["claim_lead_us"] == pytest.approx(2.5)
    gemm_table = task_timeline.format_summary("mixed", "ring", s).split("GEMM task")[1].splitlines()[1:]
    assert [line.split()[0] for line in gemm_table] == ["gate_up"]


def header_enum(header: str, enum: str, prefix: str) -> dict[int, str]:
    """The values of ``enum`` in include/mok/``header`` with their names, ``prefix`` cut and snake-cased
    (kTaskGateUp -> gate_up)."""
    from mok.cuda.build import INCLUDE_DIR
    text = (INCLUDE_DIR / "mok" / header).read_text()
    body = re.search(rf"enum {enum} : int \{{(.*?)\}};", text, re.S).group(1)
    return {int(value): re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()
            for name, value in re.findall(rf"{prefix}(\w+) = (\d+)", body)}


def test_task_kinds_and_trace_fields_match_the_backend_and_the_kernel():
    from mok.cuda.backend import TASK_KINDS, TRACE_FIELDS
    assert task_timeline.KINDS == TASK_KINDS
    kinds = header_enum("workspace.cuh", "TaskKind", "kTask")
    assert kinds.pop(0) == "stop"  # never recorded
    assert kinds.pop(5) == "idle"  # never recorded (clusters' padding tickets)
    assert kinds == TASK_KINDS
    fields = header_enum("trace.cuh", "TraceField", "kTrace")
    assert fields.pop(len(TRACE_FIELDS)) == "fields"  # the count
    assert tuple(fields[i] for i in sorted(fields)) == TRACE_FIELDS
    # load_trace's column order
    assert TRACE_FIELDS == ("claimed", "ready", "start", "done", "who", "data_in", "mainloop_done")


def test_schedule_phases_match_the_kernel():
    """trace_buffer's bound on clusters' padding tickets counts the task order's groups per step and rank."""
    from mok.cuda.backend import SCHEDULE_PHASES
    from mok.cuda.build import INCLUDE_DIR
    text = (INCLUDE_DIR / "mok" / "scheduler.cuh").read_text()
    assert int(re.search(r"kNumPhases = (\d+)", text).group(1)) == SCHEDULE_PHASES


def test_share_plot_has_one_bar_per_run_and_kind():
    tl = task_timeline.load_trace(ROWS)
    s = task_timeline.summarize(tl, {"gate_up": 1e6, "down": 2e6}, num_sms=2)
    fig = task_timeline.plot_shares({"run a": s, "run b": s})
    # per run: gate/up, down, head + tail
    assert len(fig.axes[0].patches) == 2 * 3
    widths = sorted(round(p.get_width(), 6) for p in fig.axes[0].patches[:3])  # run a's bars
    assert widths == sorted(round(100 * v, 6) for v in (0.53, 0.10, (17.0 + 20.0) / 100))


def test_task_flops_add_up_to_the_layer():
    """Tasks of full tiles (T*K a multiple of 128 rows, I of 128 and H of 256 columns) hold the layer's forward FLOPs,
    6 * T * K * H * I: per tile I/128 gate/up tasks and H/256 down tasks."""
    from mok.config import MoEShape
    shape = MoEShape(name="even", tokens=1024, hidden=512, intermediate=384, num_experts=8, top_k=2)
    flops = task_timeline.task_flops(shape)
    tiles = shape.tokens * shape.top_k // 128
    total = tiles * (shape.intermediate // 128 * flops["gate_up"] + shape.hidden // 256 * flops["down"])
    assert total == 6 * shape.tokens * shape.top_k * shape.hidden * shape.intermediate
    # Down tasks of two column blocks: half as many tasks, each twice the work.
    assert task_timeline.task_flops(shape, down_span=2)["down"] == 2 * flops["down"]


def test_ablate_mask_takes_the_backend_names_and_refuses_others():
    from mok.cuda.backend import ABLATE, PROBE

    assert task_timeline.ablate_mask("") == 0
    assert task_timeline.ablate_mask("epilogue,stores") == ABLATE["epilogue"] | PROBE["stores"]
    with pytest.raises(SystemExit, match="unknown ablation"):
        task_timeline.ablate_mask("epilog")
