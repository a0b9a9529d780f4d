"""CPU checks of the standalone SM90 probes (experiments/tma_row_gather_probe.cu, mainloop_roofline_probe.cu,
push_store_probe.cu, swiglu_epilogue_probe.cu) and mainloop_gap.py: every probe compiles for sm_90a with the
kernel's current headers, without spills and without wgmma serialisation (a serialised wgmma would make the probe's
roofline a lie), and mainloop_gap reads the probe's table and asks only for modes the probe has."""

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
PROBES = ["tma_row_gather_probe.cu", "mainloop_roofline_probe.cu", "push_store_probe.cu", "swiglu_epilogue_probe.cu"]


@needs_nvcc
@pytest.mark.parametrize("probe, defines", [(probe, []) for probe in PROBES] +
                         [("mainloop_roofline_probe.cu", ["-DPROBE_STAGES=3"])])  # round 40: a stage fewer
def test_probe_compiles_for_sm90a_without_spills_or_serialised_wgmma(probe, defines, tmp_path):
    proc = subprocess.run(
        [str(NVCC), "-O3", "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-I", str(ROOT / "mok/cuda/include"),
         *defines, "-Xptxas", "-v", "-c", "-o", str(tmp_path / "probe.o"), str(ROOT / "experiments" / probe)],
        capture_output=True, text=True, timeout=600)
    report = proc.stdout + proc.stderr
    assert proc.returncode == 0, report
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", report)]
    assert spills and max(spills) == 0, report
    stacks = [int(n) for n in re.findall(r"(\d+) bytes stack frame", report)]
    assert max(stacks) == 0, f"local memory (an accumulator indexed at run time?):\n{report}"
    assert "C7514" not in report and "C7520" not in report, f"wgmma serialised:\n{report}"


def test_roofline_probe_names_each_mode_once_in_enum_order():
    """kNames is indexed by the Mode enum and printed for every mode up to kModes: a mode added to one list and not
    the others would print another mode's time under its name, or none."""
    source = (ROOT / "experiments/mainloop_roofline_probe.cu").read_text()
    enum = re.search(r"enum Mode \{(.*?)\};", source, re.S).group(1)
    values = [int(v) for v in re.findall(r"k\w+ = (\d+),", enum)]
    names = re.findall(r'"([^"]+)"', re.search(r"const char\* kNames\[\] = \{(.*?)\};", source, re.S).group(1))
    modes = int(re.search(r"constexpr int kModes = (\d+);", source).group(1))
    assert values == list(range(modes))
    assert len(names) == modes == len(set(names))
    assert {"box-store-whole", "box-store-nowait", "box-stage-deferred", "box-global"} <= set(names)


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
    known = set(mainloop_gap.probe_mode_names())
    assert {"noload", "box", "cpasync", "mcastB", "pingpong", "noload-pingpong", "pingpong-shared", "pingpong-early",
            "pingpong-shared-early"} <= known
    assert {mode for _, mode in mainloop_gap.PROBE_MODES} <= known
    import ping_pong_probe
    assert {mode for _, b, a in ping_pong_probe.COMPARISONS for mode in (b, a)} <= known


def test_mainloop_gap_table_round_trips_and_plots():
    rows = [mainloop_gap.table_row("probe box (K 7168)", 13.439, 738.2, 1530.0, 684.0),
            mainloop_gap.table_row("anchor-5 ring, mainloops + hand-offs only", 9.988, 577.9, 1350.0, 693.0)]
    assert rows[0]["tflops_per_ghz"] == pytest.approx(738.2 / 1.53)
    log = "\n".join(["noise before", mainloop_gap.TABLE_HEADER, mainloop_gap.format_row(rows[0]),
                     "    SM clock median 1522 MHz (min 345), power median 676 W, 50 samples",
                     mainloop_gap.format_row(rows[1])])
    parsed = mainloop_gap.parse_gap_table(log)
    assert [r["workload"] for r in parsed] == [r["workload"] for r in rows]
    for got, want in zip(parsed, rows):
        assert got["tflops"] == pytest.approx(want["tflops"]) and got["sm_clock_mhz"] == want["sm_clock_mhz"]
        assert got["power_w"] == want["power_w"] and got["ms"] == pytest.approx(want["ms"])
    with pytest.raises(ValueError, match="no mainloop_gap table"):
        mainloop_gap.parse_gap_table("nothing here")
    import matplotlib.pyplot as plt
    fig = mainloop_gap.plot_gap(parsed, "test")
    assert len(fig.axes[0].collections) == 2  # one point per workload
    plt.close(fig)
    no_clock = mainloop_gap.table_row("probe box (K 7168)", 13.4, 738.2, float("nan"), float("nan"))
    fig = mainloop_gap.plot_gap([no_clock, parsed[1]], "test")  # a workload without clock samples has no point
    assert len(fig.axes[0].collections) == 1
    plt.close(fig)


def test_committed_gap_results_match_their_logs():
    """experiments/results/mainloop_gap_round13_call*.json were written from the round-13 logs by --from-log: the
    rows must be those logs' tables."""
    import json
    results = ROOT / "experiments/results"
    for call, log in [(5, "call5_gap/mainloop_gap.log"), (10, "call10_be77836/roofline.log")]:
        doc = json.loads((results / f"mainloop_gap_round13_call{call}.json").read_text())
        assert doc["rows"] == mainloop_gap.parse_gap_table((results / "h200_2026-11-29_round13" / log).read_text())


def _probe_table(rows: dict[str, float]) -> str:
    """The probe's printed table for {mode: ms} (TFLOP/s made up from the ms: 1000 / ms)."""
    lines = ["clusters of 2 resident at once: 66 (cluster grid 132 CTAs)",
             "132 CTAs x 16 tiles of 128 x 256 x 256, epilogue 0 ns per tile; median of 7 runs, modes interleaved",
             f"{'mode':<24} {'CTAs':>6} {'ms':>10} {'TFLOP/s':>10} {'TFLOP/s/SM':>12}"]
    lines += [f"{mode:<24} {132:6d} {ms:10.3f} {1000 / ms:10.1f} {1000 / ms / 132:12.2f}" for mode, ms in rows.items()]
    return "\n".join(lines) + "\n"


def test_ping_pong_probe_summary_from_logs(tmp_path):
    import ping_pong_probe as study

    # K = 256 with the shared mode; K = 4096 past the ring, where the probe leaves pingpong-shared out.
    (tmp_path / "probe_k256_e0.log").write_text(_probe_table(
        {"noload": 0.400, "box": 0.500, "box@mcastB-grid": 0.510, "pingpong": 0.550, "noload-pingpong": 0.440,
         "pingpong-shared": 0.520, "pingpong-early": 0.530, "pingpong-shared-early": 0.480}))
    (tmp_path / "probe_k256_e2200.log").write_text(_probe_table(
        {"noload": 0.440, "box": 0.540, "pingpong": 0.560, "noload-pingpong": 0.450, "pingpong-shared": 0.530}))
    (tmp_path / "probe_k4096_e0.log").write_text(_probe_table(
        {"noload": 4.000, "box": 5.000, "pingpong": 5.500, "noload-pingpong": 4.200}))
    points = study.read_logs(tmp_path)
    assert sorted(points) == [(256, 0), (256, 2200), (4096, 0)]
    assert points[(256, 0)]["box@mcastB-grid"]["ms"] == 0.510  # a mode name with '@' parses
    rows = {(r["k"], r["epilogue_ns"]): r for r in study.summarize(points, tiles_per_cta=16)}
    # (0.440 - 0.400) ms over 16 tiles = 2,500 ns per tile; epilogue 0 realises 0.
    assert rows[(256, 2200)]["realised_epilogue_ns"] == pytest.approx(2500.0)
    assert rows[(256, 0)]["realised_epilogue_ns"] == 0.0
    assert rows[(256, 2200)]["kernel's form (shared stages)"] == pytest.approx(0.530 / 0.540)
    assert rows[(256, 0)]["one warpgroup in turns, no loads"] == pytest.approx(0.440 / 0.400)
    assert rows[(4096, 0)]["CUTLASS's form (own stages)"] == pytest.approx(5.5 / 5.0)
    assert rows[(4096, 0)]["kernel's form (shared stages)"] is None
    assert rows[(256, 0)]["hand-over after the issue, shared stages"] == pytest.approx(0.480 / 0.520)
    assert rows[(256, 0)]["hand-over after the issue, own stages"] == pytest.approx(0.530 / 0.550)
    assert rows[(256, 2200)]["hand-over after the issue, own stages"] is None  # no -early rows in that log
    table = study.format_table(list(rows.values()))
    assert "2500" in table and "1.100" in table and "-" in table.splitlines()[-1]
    fig = study.plot(list(rows.values()), "synthetic")
    assert len(fig.axes) == 2  # one panel per K


def test_ping_pong_probe_rejects_text_without_a_table():
    import ping_pong_probe as study

    with pytest.raises(ValueError, match="no probe table"):
        study.parse_probe_table("probe: K must be a positive multiple of 64, got 100\n")


def test_mainloop_gap_runs_the_modes_asked_for_at_their_k():
    """--modes runs the probe's modes in the order given (a repeat runs again) at --k; a name the probe does not have
    is refused before anything runs."""
    assert mainloop_gap.probe_modes(None) == mainloop_gap.PROBE_MODES
    assert mainloop_gap.probe_modes(["box", "mcastB", "box"], 4096) == [
        ("probe box (K 4096)", "box"), ("probe mcastB (K 4096)", "mcastB"), ("probe box (K 4096)", "box")]
    assert [mode for _, mode in mainloop_gap.probe_modes(None, 2048)] == [m for _, m in mainloop_gap.PROBE_MODES]
    assert "box@mcastB-grid" in mainloop_gap.probe_mode_names()
    with pytest.raises(ValueError, match="no mode 'boxx'"):
        mainloop_gap.probe_modes(["box", "boxx"])
