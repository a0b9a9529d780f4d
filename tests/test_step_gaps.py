"""experiments/step_gaps.py: the timeline arithmetic (busy time, idle gaps) on made-up kernels, and on the GPU the
script end to end at a small shape."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "experiments"))

from step_gaps import Kernel, gpu_busy, idle_stretches, longest_gaps, pass_summary  # noqa: E402


def test_busy_time_counts_overlapping_kernels_once_and_clips_to_the_window():
    kernels = [Kernel("a", 0, 10), Kernel("b", 5, 15), Kernel("c", 20, 30), Kernel("d", 22, 25)]
    assert gpu_busy(kernels, 0, 30) == 25  # [0, 15) and [20, 30)
    assert gpu_busy(kernels, 8, 22) == 9   # [8, 15) and [20, 22)
    assert gpu_busy([], 0, 10) == 0


def test_gaps_are_the_idle_stretches_longest_first_with_their_neighbours():
    # "b" ends after "c" starts (another stream): no gap between them; the idle stretches are [15, 20) and [30, 40).
    kernels = [Kernel("a", 0, 10), Kernel("b", 5, 15), Kernel("c", 12, 14), Kernel("d", 20, 30), Kernel("e", 40, 41)]
    gaps = longest_gaps(kernels, 5)
    assert [(g.length, g.at, g.before, g.after) for g in gaps] == [(10, 30, "d", "e"), (5, 15, "b", "d")]
    assert longest_gaps(kernels, 1) == gaps[:1]


def test_a_pass_summary_adds_up():
    kernels = [Kernel("f1", 0, 4), Kernel("f2", 6, 10), Kernel("b1", 12, 20), Kernel("b2", 25, 30)]
    fwd = pass_summary(kernels, 0, 12, 3)
    bwd = pass_summary(kernels, 12, 30, 3)
    assert (fwd["kernels"], fwd["busy_us"], fwd["idle_us"]) == (2, 8, 4)
    assert (bwd["kernels"], bwd["busy_us"], bwd["idle_us"]) == (2, 13, 5)
    assert [g["length"] for g in bwd["gaps"]] == [5]
    assert sorted(g["length"] for g in fwd["gaps"]) == [2, 2]  # between f1 and f2, and after f2 to the pass's end


def test_the_wait_for_the_first_launch_is_an_idle_stretch():
    gaps = idle_stretches([Kernel("k1", 3, 5), Kernel("k2", 5, 9)], 0, 10)
    assert [(g.length, g.at, g.before, g.after) for g in gaps] == [(3, 0, "(start)", "k1"), (1, 9, "k2", "(end)")]


@pytest.mark.gpu
def test_the_script_profiles_a_small_step(tmp_path):
    out = tmp_path / "gaps.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, str(REPO / "experiments" / "step_gaps.py"), "2048,512,256,16,4",
                           "--backends", "triton,torch", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = json.loads(out.read_text())["results"]
    assert [r["backend"] for r in rows] == ["triton", "torch"]
    for r in rows:
        for part in ("step", "forward", "backward"):
            p = r[part]
            assert p["kernels"] > 0 and 0 < p["busy_us"] <= p["span_us"] + 1e-6, (r["backend"], part, p)
        assert r["forward"]["kernels"] + r["backward"]["kernels"] <= r["step"]["kernels"]
