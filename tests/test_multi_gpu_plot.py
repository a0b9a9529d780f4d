"""experiments/multi_gpu/plot_bench.py on the two-H200 records of round 9 (CPU, matplotlib)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import load_experiment

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments/results/multi_gpu/x2_2026-11-29_round9"


def _plot_module():
    return load_experiment("multi_gpu/plot_bench.py")


def test_rows_come_from_the_record():
    plot_bench = _plot_module()
    record = json.loads((RESULTS / "bench_x2_uniform.json").read_text())
    models, ms = plot_bench.layer_rows(record)
    assert models == ["kimi-k2.7", "glm-5.2", "qwen3.5-397b", "deepseek-v4-pro"]
    assert set(ms) == {"nccl", "triton", "cuda"}
    assert ms["cuda"][0] == record["layers"]["kimi-k2.7/cuda"]["forward_ms"]
    transfers = json.loads((RESULTS / "pp_nospec.json").read_text())
    models, rates = plot_bench.transfer_rows(transfers, "zipf", "busiest_GBps")
    assert models[0] == "kimi-k2.7"
    assert rates["push_dispatch"][0] == transfers["transfers"]["kimi-k2.7/zipf"]["push_dispatch"]["busiest_GBps"]


def test_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "bench.png"
    _plot_module().main(["--layers", str(RESULTS / "bench_x2_uniform.json"), "--transfers",
                         str(RESULTS / "pp_nospec.json"), "--out", str(out)])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
