"""experiments/ab_kernels.py builds its second kernel from a patched copy of mok/cuda: checked without a GPU (the
copy, the patch's kernel hunks, and that the copy builds under its own extension name)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mok import MoKConfig
from mok.cuda import build

from conftest import load_experiment

ROOT = Path(__file__).resolve().parents[1]
# A candidate that was measured and not adopted (round 36: 8 tokens per sum-kernel CTA), so it stays unapplied.
CANDIDATES = ROOT / "experiments" / "results" / "h200_2026-12-01_round35" / "patches" / "sum_tokens8.patch"
CANDIDATE_FILE = ("include", "mok", "weighted_sum.cuh")
CANDIDATE_TEXT = "kSumTokens = 8;"


def load_script():
    return load_experiment("ab_kernels.py")


HAS_CANDIDATES = CANDIDATE_TEXT in build.PACKAGE_DIR.joinpath(*CANDIDATE_FILE).read_text()
needs_unpatched_tree = pytest.mark.skipif(HAS_CANDIDATES, reason="this tree already contains the candidate patch")


@needs_unpatched_tree
@pytest.mark.skipif(shutil.which("git") is None, reason="git applies the patch")
def test_patched_tree_applies_the_kernel_hunks_to_a_copy(tmp_path):
    script = load_script()
    tree = script.patched_tree(CANDIDATES, tmp_path)
    assert (tree / "include" / "mok" / "sm90_moe_forward.cuh").is_file() and (tree / "csrc" / "binding.cpp").is_file()
    assert CANDIDATE_TEXT in tree.joinpath(*CANDIDATE_FILE).read_text()
    assert CANDIDATE_TEXT not in build.PACKAGE_DIR.joinpath(*CANDIDATE_FILE).read_text(), \
        "the patch must not touch this tree"
    flags = build.nvcc_flags(verbose=False, lineinfo=False)
    assert build.source_fingerprint(flags, tree) != build.source_fingerprint(flags)


def test_an_unchanged_copy_has_the_same_fingerprint(tmp_path):
    for part in ("include", "csrc"):
        shutil.copytree(build.PACKAGE_DIR / part, tmp_path / part)
    flags = build.nvcc_flags(verbose=False, lineinfo=False)
    assert build.source_fingerprint(flags, tmp_path) == build.source_fingerprint(flags)


@needs_unpatched_tree
@pytest.mark.skipif(build.find_nvcc() is None, reason="needs nvcc")
def test_the_patched_kernel_compiles(tmp_path):
    tree = load_script().patched_tree(CANDIDATES, tmp_path)
    nvcc = build.find_nvcc()
    cmd = [nvcc, *build.nvcc_flags(verbose=False, lineinfo=False), *[f"-I{d}" for d in build.include_dirs(tree)],
           "-c", str(tree / "csrc" / build.KERNEL_SOURCE.name), "-o", str(tmp_path / "kernel.o")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_clock_log_is_read_per_time_window(tmp_path):
    """The nvidia-smi samples (timestamp, SM MHz, W) are parsed and summarised inside a shape's time window."""
    from datetime import datetime
    script = load_script()
    log = tmp_path / "clocks.csv"
    log.write_text("2026/11/29 15:30:00.000, 1980, 650.5\n2026/11/29 15:30:00.050, 1755, 699.0\n"
                   "2026/11/29 15:30:01.000, 1980, 120.0\nnot a sample\n")
    samples = script.read_clock_log(log)
    assert [m for _, m, _ in samples] == [1980.0, 1755.0, 1980.0]
    start = datetime(2026, 11, 29, 15, 30, 0).timestamp()
    summary = script.clock_summary(samples, start, start + 0.1)
    assert "min 1755" in summary and "2 samples" in summary
    assert script.clock_summary(samples, start + 5, start + 6) == "no clock samples"


def test_launch_options_are_parsed_as_keyword_arguments():
    """--launch-a/--launch-b/--prepare KEY=VALUE: ints, true/false as bools, other text as strings; no '=' or a key
    that is not a name is refused."""
    script = load_script()
    assert script.parse_options(["early_combine=1", "signal_warp=false", "dispatch=ring", "num_ctas=-3"]) == {
        "early_combine": 1, "signal_warp": False, "dispatch": "ring", "num_ctas": -3}
    assert script.parse_options([]) == {}
    for bad in ("early_combine", "=1", "not a name=1"):
        with pytest.raises(ValueError):
            script.parse_options([bad])


def test_an_options_only_comparison_needs_options_that_differ():
    """Without --patch or --tree both sides are this tree's build, so A and B must launch differently."""
    script = load_script()
    with pytest.raises(SystemExit):
        script.main(["anchor-1"])
    with pytest.raises(SystemExit):
        script.main(["--launch-a", "early_combine=1", "--launch-b", "early_combine=1", "anchor-1"])


def test_a_builds_own_dispatch_overrides_the_common_one():
    """--launch-b dispatch=gather against the default ring: each build gets one dispatch keyword (round 18's first
    try passed it twice and stopped)."""
    options = load_script().build_launch_options("ring", ["store_warps=false"], ["dispatch=gather", "down_span=4"])
    assert options["A"] == {"dispatch": "ring", "store_warps": False}
    assert options["B"] == {"dispatch": "gather", "down_span": 4}
    # without --dispatch the backend's default stands (and 'launch options default' is printed for none)
    assert load_script().build_launch_options(None, [], ["overlap_steps=true"]) == {"A": {}, "B": {"overlap_steps": True}}


def test_prepare_options_per_side_with_config_fields_gathered():
    """--prepare for both, --prepare-a/--prepare-b on top; MoKConfig fields (the minibatch size) become the prepare's
    config, the others pass through; differing prepare options alone make a comparison."""
    script = load_script()
    options = script.build_prepare_options(["early_combine=1"], [], ["minibatch_rows=8192", "early_combine=0"])
    assert options == {"A": {"early_combine": 1}, "B": {"minibatch_rows": 8192, "early_combine": 0}}
    kwargs = script.prepare_kwargs(options["B"])
    assert kwargs["early_combine"] == 0 and kwargs["config"].minibatch_rows == 8192
    assert kwargs["config"].policy == MoKConfig().policy  # the other fields keep their defaults
    assert script.prepare_kwargs(options["A"]) == {"early_combine": 1}  # no config field: no config passed
    assert script.prepare_kwargs({"policy": "whole"})["config"].policy == "whole"
    with pytest.raises(SystemExit):  # the same prepare options on both sides and nothing else: nothing to compare
        script.main(["--prepare-a", "minibatch_rows=8192", "--prepare-b", "minibatch_rows=8192", "anchor-1"])
