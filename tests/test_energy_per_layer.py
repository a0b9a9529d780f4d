"""experiments/energy_per_layer.py's arithmetic (medians of the clock samples inside a run, energy per call),
checked without a GPU; its argument parsing too."""

from __future__ import annotations

import math

import pytest

from conftest import load_experiment


def load_script():
    return load_experiment("energy_per_layer.py")


def test_a_run_row_takes_the_samples_inside_the_run_and_multiplies_power_by_time():
    script = load_script()
    # Samples (unix time, MHz, W): the one at t=0 is before the run's window and the one at t=9 after it.
    samples = [(0.0, 1980.0, 100.0), (2.0, 1500.0, 690.0), (3.0, 1400.0, 700.0), (4.0, 1450.0, 710.0),
               (9.0, 1980.0, 90.0)]
    row = script.run_row("anchor-2", "cuda", ms=8.0, samples=samples, start=1.0, stop=5.0, flops=3.2e12)
    assert row["samples"] == 3
    assert row["sm_mhz"] == 1450.0 and row["watts"] == 700.0
    assert math.isclose(row["joules"], 700.0 * 8e-3)
    assert math.isclose(row["tflops"], 400.0)
    assert math.isclose(row["tflops_per_ghz"], 400.0 / 1.45)
    table = script.format_table([row])
    assert "| anchor-2 | cuda | 8.000 | 400.0 | 1450 | 700 | 5.60 |" in table


def test_a_run_without_samples_says_so_with_nan():
    row = load_script().run_row("anchor-5", "torch", ms=10.0, samples=[], start=0.0, stop=1.0, flops=1e12)
    assert row["samples"] == 0 and math.isnan(row["watts"]) and math.isnan(row["joules"])


def test_needs_a_shape():
    with pytest.raises(SystemExit):
        load_script().main([])


def test_replot_draws_an_earlier_runs_json(tmp_path):
    pytest.importorskip("matplotlib")
    script = load_script()
    samples = [(1.5, 1500.0, 690.0), (2.5, 1600.0, 700.0)]
    rows = [script.run_row(shape, backend, ms, samples, 1.0, 3.0, 3.2e12)
            for shape in ("anchor-2", "anchor-5") for backend, ms in (("cuda", 8.0), ("sonicmoe", 7.5))]
    (tmp_path / "runs.json").write_text(__import__("json").dumps({"rows": rows}))
    script.main(["--replot", str(tmp_path / "runs.json"), "--plot", str(tmp_path / "runs.png")])
    assert (tmp_path / "runs.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        script.main(["--replot", str(tmp_path / "runs.json")])  # --replot without --plot
