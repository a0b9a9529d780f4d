"""CPU checks of round 13's mainloop probes (experiments/tma_row_gather_probe.cu, mainloop_roofline_probe.cu and
mainloop_gap.py): both probes compile for sm_90a with the kernel's current headers, without spills and without
wgmma serialisation (a serialised wgmma would make the probe's roofline a lie), and mainloop_gap reads the probe's
table and asks only for modes the probe has."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from mok.cuda import build

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import mainloop_gap  # noqa: E402

NVCC = build.find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)")
PROBES = ["tma_row_gather_probe.cu", "mainloop_roofline_probe.cu"]


@needs_nvcc
@pytest.mark.parametrize("probe", PROBES)
def test_probe_compiles_for_sm90a_without_spills_or_serialised_wgmma(probe, tmp_path):
    proc = subprocess.run(
        [str(NVCC), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-I", str(ROOT / "mok/cuda/include"),
         "-Xptxas", "-v", "-c", "-o", str(tmp_path / "probe.o"), str(ROOT / "experiments" / probe)],
        capture_output=True, text=True, timeout=600)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", report)]
    assert spills and max(spills) == 0, report
    stacks = [int(n) for n in re.findall(r"(\d+) bytes stack frame", report)]
    assert max(stacks) == 0, f"local memory (an accumulator indexed at run time?):\n{report}"
    assert "C7514" not in report and "C7520" not in report, f"wgmma serialised:\n{report}"


def test_mainloop_gap_reads_the_probe_table():
    table = """132 CTAs x 160 tiles of 128 x 256 x 7168; median of 7 runs, modes interleaved
mode                       CTAs         ms    TFLOP/s   TFLOP/s/SM
box                         132     11.955      829.9         6.29
mcastB                      132     12.136      817.5         6.19
mcastB-release.cluster      132     21.955      451.9         3.42
cpasync-nofence             132     14.541      682.3         5.17
"""
    assert mainloop_gap.parse_probe_row(table, "box") == (11.955, 829.9)
    assert mainloop_gap.parse_probe_row(table, "mcastB") == (12.136, 817.5)  # not the release.cluster row
    with pytest.raises(RuntimeError, match="cpasync"):
        mainloop_gap.parse_probe_row(table, "cpasync")  # only cpasync-nofence is there


def test_mainloop_gap_asks_only_for_modes_the_probe_has():
    source = (ROOT / "experiments/mainloop_roofline_probe.cu").read_text()
    names = re.search(r"const char\* kNames\[\] = \{(.*?)\};", source, re.S).group(1)
    known = set(re.findall(r'"([^"]+)"', names))
    assert {"noload", "box", "cpasync", "mcastB"} <= known
    assert {mode for _, mode in mainloop_gap.PROBE_MODES} <= known
