"""experiments/rotation_probe.py's bookkeeping on the CPU: the two series orders, every call kept with the label
before its series, and the summary by position and predecessor (its GPU phases run on the H200 only)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import rotation_probe as probe  # noqa: E402


def test_shifted_order_is_the_old_rotation_and_balanced_is_the_harness_order():
    from mok.bench.harness import balanced_series_order

    assert probe.series_order(["a", "b", "c"], 2, "shifted") == ["a", "b", "c", "b", "c", "a"]
    assert probe.series_order(["a", "b", "c"], 2, "balanced") == balanced_series_order(["a", "b", "c"], 2, "c")
    with pytest.raises(ValueError, match="shifted"):
        probe.series_order(["a"], 1, "random")


def test_timed_rotation_keeps_every_call_with_its_position_and_predecessor():
    ran = []
    fns = {label: (lambda i, label=label: ran.append((label, i))) for label in ("a", "b")}
    calls = probe.timed_rotation(fns, "alone", "cpu", rounds=2, calls=3, n_sets=2, order="shifted")
    assert [label for label, _ in ran] == ["a"] * 3 + ["b"] * 6 + ["a"] * 3
    assert [c.position for c in calls] == [0, 1, 2] * 4
    assert [c.after for c in calls if c.position == 0] == ["(start)", "a", "b", "b"]
    assert [c.round for c in calls if c.position == 0] == [0, 1, 2, 3]
    assert all(c.phase == "alone" and c.ms >= 0 for c in calls)


def test_summary_splits_first_calls_by_the_label_before_them():
    C = probe.CallTime
    calls = [C("rotation", "cuda", 0, 0, "torch", 8.0), C("rotation", "cuda", 0, 1, "torch", 7.0),
             C("rotation", "cuda", 1, 0, "sonicmoe", 9.0), C("rotation", "cuda", 1, 1, "sonicmoe", 7.5),
             C("alone", "cuda", 0, 0, "(start)", 8.5)]
    summary = probe.summarize_calls(calls)
    row = summary["rotation"]["cuda"]
    assert row["calls"] == 4 and row["median_ms"] == pytest.approx(7.75)
    assert row["first_in_series_ms"] == pytest.approx(8.5) and row["later_in_series_ms"] == pytest.approx(7.25)
    assert row["first_after_ms"] == {"sonicmoe": 9.0, "torch": 8.0}
    assert "first_after_ms" not in summary["alone"]["cuda"]  # one predecessor only: nothing to split


def test_the_plot_draws_one_panel_per_shape_and_backend_from_a_saved_report(tmp_path):
    pytest.importorskip("matplotlib")
    C = probe.CallTime
    calls = [C("rotation", label, r, pos, after, 5.0 + r + pos)
             for r, (label, after) in enumerate([("cuda", "torch"), ("torch", "cuda"), ("cuda", "sonicmoe")])
             for pos in range(3)]
    calls.append(C("rotation", "sonicmoe", 3, 0, "(start)", 9.0))  # no predecessor: left out of the plot
    report = [{"shape": "anchor-2", "calls": [probe.asdict(c) for c in calls]}]
    path = probe.plot_predecessors(report, str(tmp_path / "p.png"))
    assert path and (tmp_path / "p.png").stat().st_size > 1000
    assert probe.plot_predecessors([{"shape": "x", "calls": []}], str(tmp_path / "none.png")) is None
    assert not (tmp_path / "none.png").exists()
