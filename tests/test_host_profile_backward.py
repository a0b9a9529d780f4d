"""experiments/host_profile_backward.py (the cuda backward's host time with the Triton launches stubbed, a CPU
proxy) runs, in a process of its own since it patches Triton's interpreter and mok's host branches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "experiments" / "host_profile_backward.py"


def test_host_profile_counts_the_launches_and_times_the_host_work():
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1])}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--calls", "5", "--ops"], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    summary = next(line for line in lines if line.startswith("T=512 H=256 I=128 E=8 K=1: "))
    launches = int(summary.split(": ")[1].split(" launches")[0])
    assert 1 <= launches <= 20, summary  # one window: a handful of kernels, not thousands (the bodies never ran)
    assert "host time per call p10" in summary
    ops = next(line for line in lines if line.startswith("aten operations per call: "))
    assert int(ops.split(": ")[1]) > 0
