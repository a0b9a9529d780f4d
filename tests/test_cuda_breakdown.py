"""experiments/cuda_breakdown.py redraws its table and plot from a saved JSON without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import load_experiment

ROOT = Path(__file__).resolve().parents[1]
SAVED = ROOT / "experiments" / "results" / "cuda_breakdown_20261129-114149.json"


def load_script():
    return load_experiment("cuda_breakdown.py")


def test_from_json_prints_every_shape_and_draws_the_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    script = load_script()
    assert script.main(["--from-json", str(SAVED), "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    for shape in ("anchor-1", "anchor-4", "kimi-k2.7/ep64", "deepseek-v4-pro/ep64"):
        assert f"| {shape} |" in printed
    png = tmp_path / (SAVED.stem + ".png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
