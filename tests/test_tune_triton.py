"""experiments/tune_triton.py end to end on the CPU (Triton interpreter, the tiny shape, a short budget): the
default configuration is measured and compared with itself, candidates are compared with it, and the JSON names
the defaults by reduction depth. The GPU runs of round 28 used it to pick the defaults in mok/triton_ref/_common.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import EXPERIMENTS


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU smoke run; the GPU tunes for real")
def test_tuner_runs_and_reports_the_defaults_bits(tmp_path):
    out = tmp_path / "tune.json"
    env = dict(os.environ, TRITON_INTERPRET="1", TRITON_CACHE_DIR=str(tmp_path / "triton"))
    env.pop("OUT", None)
    proc = subprocess.run(
        [sys.executable, str(EXPERIMENTS / "tune_triton.py"), "--device", "cpu", "--shapes", "tiny", "--kernels",
         "wgrad_few_rows", "--budget", "1", "--warmup", "0", "--iters", "1", "--no-layer", "--no-torch",
         "--json", str(out)], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["short_k_defaults"]["dx_dgrad"][0] == 2048
    (shape,) = doc["results"]
    rows = shape["candidates"]["wgrad_few_rows"]
    default = rows[0]
    assert default["default"] and default["status"] == "ok" and default["bitwise"] and default["ms"] > 0
    assert all(row["status"] == "ok" or row["status"].startswith("skipped") for row in rows[1:]), rows
    assert "wgrad_few_rows" in proc.stdout
