"""experiments/energy_per_layer.py's arithmetic (means of the clock samples inside a run's window, energy per
call), its run order, the re-reading of a saved log by busy stretches, the plot, and the backend entries with MOK_
switches (round 41), checked without a GPU; its argument parsing too."""

from __future__ import annotations

import gzip
import json
import math
import os

import pytest

from conftest import load_experiment


def load_script():
    return load_experiment("energy_per_layer.py")


def test_a_run_row_averages_the_samples_inside_its_window_and_multiplies_power_by_time():
    script = load_script()
    # Samples (unix time, MHz, W): the one at t=0 is before the run's window and the one at t=9 after it.
    samples = [(0.0, 1980.0, 100.0), (2.0, 1500.0, 690.0), (3.0, 1400.0, 700.0), (4.0, 1450.0, 710.0),
               (9.0, 1980.0, 90.0)]
    row = script.run_row("anchor-2", "cuda", ms=8.0, samples=samples, start=1.0, stop=5.0, flops=3.2e12)
    assert row["samples"] == 3 and row["window"] == [1.0, 5.0]
    assert row["sm_mhz"] == pytest.approx(1450.0) and row["watts"] == pytest.approx(700.0)
    assert row["joules"] == pytest.approx(700.0 * 8e-3)
    assert row["tflops"] == pytest.approx(400.0)
    assert row["tflops_per_ghz"] == pytest.approx(400.0 / 1.45)
    table = script.format_table([{**row, "repeat": 1}])
    assert "| anchor-2 | cuda | 1 | 8.000 | 400.0 | 1450 | 700 | 5.60 |" in table


def test_a_run_without_samples_says_so_with_nan():
    row = load_script().run_row("anchor-5", "torch", ms=10.0, samples=[], start=0.0, stop=1.0, flops=1e12)
    assert row["samples"] == 0 and math.isnan(row["watts"]) and math.isnan(row["joules"])


def test_the_order_reverses_on_every_other_repeat():
    order = load_script().run_order(["cuda", "sonicmoe", "torch"], repeats=3)
    assert order == [(0, "cuda"), (0, "sonicmoe"), (0, "torch"), (1, "torch"), (1, "sonicmoe"), (1, "cuda"),
                     (2, "cuda"), (2, "sonicmoe"), (2, "torch")]


def _trace(stretches):
    """A 50 ms power log: 100 W at rest, `watts` during each (start, seconds, watts, MHz) stretch."""
    samples = []
    for i in range(600):
        t, watts, mhz = i / 20, 100.0, 1980.0
        for start, seconds, w, m in stretches:
            if start <= t < start + seconds:
                watts, mhz = w, m
        samples.append((t, mhz, watts))
    return samples


def test_busy_windows_find_the_runs_and_leave_out_short_bursts():
    samples = _trace([(1.0, 0.5, 600.0, 1900.0), (3.0, 4.0, 690.0, 1500.0), (10.0, 4.0, 700.0, 1600.0)])
    windows = load_script().busy_windows(samples)
    assert len(windows) == 2  # the 0.5 s warm-up burst is no run
    assert windows[0][0] == pytest.approx(3.0) and windows[0][1] == pytest.approx(6.95)
    assert windows[1][0] == pytest.approx(10.0)


def test_reread_rows_takes_each_runs_busy_stretch_and_keeps_its_time(tmp_path):
    script = load_script()
    samples = _trace([(3.0, 4.0, 690.0, 1500.0), (10.0, 4.0, 700.0, 1600.0)])
    old = [{"shape": "anchor-2", "backend": "cuda", "ms": 8.0, "tflops": 400.0, "repeat": 0},
           {"shape": "anchor-2", "backend": "sonicmoe", "ms": 7.5, "tflops": 400.0 * 8.0 / 7.5, "repeat": 0}]
    rows = script.reread_rows(old, samples)
    assert [r["backend"] for r in rows] == ["cuda", "sonicmoe"]
    # The stretch [3.0, 6.95] less a second at each end.
    assert rows[0]["window"] == [pytest.approx(4.0), pytest.approx(5.95)] and rows[0]["samples"] == 40
    assert rows[0]["sm_mhz"] == pytest.approx(1500.0) and rows[1]["watts"] == pytest.approx(700.0)
    assert rows[1]["ms"] == 7.5 and rows[1]["tflops"] == pytest.approx(400.0 * 8.0 / 7.5)
    assert rows[1]["joules"] == pytest.approx(700.0 * 7.5e-3)
    with pytest.raises(ValueError, match="busy stretches"):
        script.reread_rows(old[:1], samples)  # two stretches for one run: the log is not that run's
    # Through the command line, from a gzipped nvidia-smi log.
    log = "\n".join(f"2026/12/01 00:00:{t:06.3f}, {m:.0f}, {w:.1f}" for t, m, w in samples)
    (tmp_path / "log.csv.gz").write_bytes(gzip.compress(log.encode()))
    (tmp_path / "old.json").write_text(json.dumps({"rows": old}))
    script.main(["--reread", str(tmp_path / "log.csv.gz"), "--runs", str(tmp_path / "old.json"),
                 "--json", str(tmp_path / "new.json")])
    again = json.loads((tmp_path / "new.json").read_text())["rows"]
    assert [round(r["sm_mhz"]) for r in again] == [1500, 1600]


def test_replot_draws_an_earlier_runs_json(tmp_path):
    pytest.importorskip("matplotlib")
    script = load_script()
    samples = [(1.5, 1500.0, 690.0), (2.5, 1600.0, 700.0)]
    rows = [script.run_row(shape, backend, ms, samples, 1.0, 3.0, 3.2e12)
            for shape in ("anchor-2", "anchor-5") for backend, ms in (("cuda", 8.0), ("sonicmoe", 7.5))]
    (tmp_path / "runs.json").write_text(json.dumps({"rows": rows}))
    script.main(["--replot", str(tmp_path / "runs.json"), "--plot", str(tmp_path / "runs.png")])
    assert (tmp_path / "runs.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        script.main(["--replot", str(tmp_path / "runs.json")])  # --replot without --plot


def test_needs_a_shape_or_a_file_to_read():
    script = load_script()
    with pytest.raises(SystemExit):
        script.main([])
    with pytest.raises(SystemExit):
        script.main(["--reread", "log.csv"])  # without --runs


def test_a_backend_entry_may_carry_mok_switches():
    script = load_script()
    assert script.parse_backend("cuda") == ("cuda", {})
    assert script.parse_backend("cuda+MOK_CUDA_DISPATCH=gather+MOK_CUDA_SUM_KERNEL=0") == (
        "cuda", {"MOK_CUDA_DISPATCH": "gather", "MOK_CUDA_SUM_KERNEL": "0"})
    for bad in ("cuda+DISPATCH=gather", "cuda+MOK_CUDA_DISPATCH", "+MOK_CUDA_DISPATCH=gather",
                "sonicmoe+MOK_CUDA_DISPATCH=gather"):
        with pytest.raises(ValueError):
            script.parse_backend(bad)
    from mok.bench.baselines import SONIC_NAME
    assert script.SONIC_BACKEND == SONIC_NAME


def test_each_entry_runs_under_its_own_switches_and_the_others_unset(monkeypatch):
    script = load_script()
    monkeypatch.setenv("MOK_CUDA_DISPATCH", "ring")  # set by the caller: the plain entry must not see it either
    seen = []

    def layer(i):
        seen.append((i, os.environ.get("MOK_CUDA_DISPATCH")))

    names = {"MOK_CUDA_DISPATCH"}
    script.under_switches(layer, {"MOK_CUDA_DISPATCH": "gather"}, names)(0)
    script.under_switches(layer, {}, names)(1)
    assert seen == [(0, "gather"), (1, None)]
    assert os.environ["MOK_CUDA_DISPATCH"] == "ring"  # restored after each call
    assert script.under_switches(layer, {}, set()) is layer  # no entry has switches: the call as it is


def test_a_bad_backend_entry_stops_before_any_gpu_work(capsys):
    with pytest.raises(SystemExit):
        load_script().main(["anchor-3", "--backends", "cuda,cuda+DISPATCH=gather"])
    assert "MOK_NAME=VALUE" in capsys.readouterr().err
