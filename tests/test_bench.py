"""The benchmark harness on the CPU: exact accounting, the --quick run's files, and non-terminal output."""

from __future__ import annotations

import json
import math

import pytest
import torch

from mok.bench import harness
from mok.bench.cli import main, parse_shapes
from mok.config import MoEShape

METADATA_FIELDS = ("date", "gpu", "sm_count", "torch", "triton", "git_commit", "source_digest", "device_type")


def test_flops_and_bytes_exact_for_anchor_1():
    shape = MoEShape("a1", 24576, 1536, 256, 128, 8)
    t, h, i, e, k = 24576, 1536, 256, 128, 8
    assert harness.layer_flops(shape, "fwd") == 6 * t * k * h * i == 463_856_467_968
    assert harness.layer_flops(shape, "bwd") == 2 * 6 * t * k * h * i
    # Forward: x and out (bf16), three weight tensors (bf16), routing (int32 id + fp32 weight per slot).
    assert harness.layer_traffic(shape, "fwd") == {"x": t * h * 2, "weights": 3 * e * i * h * 2,
                                                   "out": t * h * 2, "routing": t * k * 8}
    assert harness.layer_bytes(shape, "fwd") == 2 * t * h * 2 + 3 * e * i * h * 2 + t * k * 8 == 454_557_696
    # Backward: dO, x, weights, routing in; dx, dW, d router weights out.
    assert harness.layer_bytes(shape, "bwd") == (3 * t * h * 2 + 2 * 3 * e * i * h * 2 + t * k * 8 + t * k * 4)
    # MXFP8 weights: one byte per element plus one scale byte per 32 elements.
    assert harness.layer_traffic(shape, "fwd", "mxfp8")["weights"] == 3 * e * i * h + 3 * e * i * h // 32
    assert harness.tflops(1e12, 1.0) == pytest.approx(1000.0)
    assert harness.gbps(4e9, 2.0) == pytest.approx(2000.0)
    with pytest.raises(ValueError, match="pass_"):
        harness.layer_flops(shape, "both")


def test_records_ratios_and_geomean():
    shape = MoEShape("s", 128, 64, 32, 8, 2)
    fast = harness.make_record(shape, "triton", "bf16", "fwd", harness.Timing(1.0, 0.9, 1.1, 10, "x"))
    base = harness.make_record(shape, "torch", "bf16", "fwd", harness.Timing(4.0, 3.9, 4.1, 10, "x"))
    harness.add_ratios([fast, base])
    assert fast["ratios"] == {"torch": 4.0}
    assert fast["tflops"] == pytest.approx(shape.forward_flops / 1e-3 / 1e12)
    assert harness.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert harness.geomean([None, -1.0]) is None
    summary = harness.geomean_summary([fast, base])
    assert summary["triton"]["bf16/fwd"]["vs_torch"] == pytest.approx(4.0)
    assert "vs_torch" not in summary["torch"]["bf16/fwd"]  # no ratio of a baseline to itself


def test_time_fn_rotates_input_sets():
    seen = []
    timing = harness.time_fn(seen.append, device="cpu", n_sets=3, warmup=2, iters=5)
    assert seen == [0, 1, 0, 1, 2, 0, 1]
    assert timing.iters == 5 and timing.method == "host-clock" and timing.median_ms >= 0


def _series(order):
    """The labels of consecutive runs of one label in ``order`` (a list of (label, set index))."""
    labels = [label for label, _ in order]
    return [label for i, label in enumerate(labels) if i == 0 or labels[i - 1] != label]


@pytest.mark.parametrize("labels", [["A"], ["A", "B"], ["A", "B", "C"], ["A", "B", "C", "D", "E"]])
@pytest.mark.parametrize("rounds", [1, 2, 5])
def test_balanced_series_order_puts_every_label_after_every_other_equally_often(labels, rounds):
    """Each ordered pair of different labels is one step of the order exactly as often as any other (the step from
    ``previous`` to the first series included), no label follows itself, and each label runs ``rounds`` series
    rounded up to a multiple of the other labels' count."""
    from collections import Counter

    n = len(labels)
    for previous in labels:
        order = harness.balanced_series_order(labels, rounds, previous=previous)
        per_label = rounds if n == 1 else -(-rounds // (n - 1)) * (n - 1)
        assert Counter(order) == {label: per_label for label in labels}
        if n == 1:
            continue
        steps = Counter(zip([previous] + order[:-1], order))
        assert all(a != b for a, b in steps)
        assert set(steps) == {(a, b) for a in labels for b in labels if a != b}
        assert len(set(steps.values())) == 1
        assert order[-1] == previous  # a closed walk: the next cycle would follow on


def test_balanced_series_order_corrects_the_shifted_rotation():
    """Round 31: the rotation shifted by one label per round (the harness's order before) put the third label after
    the second in 4 of 5 rounds; the balanced order puts it after each of the other two equally often."""
    from collections import Counter

    labels = ["torch", "sonicmoe", "cuda"]
    shifted = [label for r in range(5) for label in labels[r % 3:] + labels[:r % 3]]
    before_cuda = Counter(shifted[i - 1] for i in range(1, len(shifted)) if shifted[i] == "cuda")
    assert before_cuda == {"sonicmoe": 4, "torch": 1}
    order = harness.balanced_series_order(labels, 5, previous="cuda")
    before_cuda = Counter(p for p, label in zip(["cuda"] + order[:-1], order) if label == "cuda")
    assert before_cuda == {"sonicmoe": 3, "torch": 3}


def test_time_interleaved_runs_series_in_the_balanced_order():
    """Each call rotates the input sets, the series follow :func:`harness.balanced_series_order`, and every version
    gets (rounds rounded up) x calls timings."""
    order = []
    fns = {label: (lambda j, label=label: order.append((label, j))) for label in ("A", "B", "C")}
    timings = harness.time_interleaved(fns, device="cpu", n_sets=2, rounds=3, calls=2)
    assert _series(order) == harness.balanced_series_order(["A", "B", "C"], 3)
    assert order[:4] == [("A", 0), ("A", 1), ("B", 0), ("B", 1)]
    assert {label: t.iters for label, t in timings.items()} == {"A": 8, "B": 8, "C": 8}
    assert all(t.method == "host-clock" for t in timings.values())


def test_time_rotated_warms_every_label_then_runs_balanced_series_of_calls():
    """Each label is warmed up first, the last label last; then series of ``calls`` back to back in the balanced
    order that starts after the last warmed label, each label getting (rounds rounded up) x calls timings."""
    order = []
    fns = {label: (lambda j, label=label: order.append((label, j))) for label in ("A", "B", "C")}
    timings = harness.time_rotated(fns, device="cpu", n_sets=2, warmup=1, rounds=3, calls=2)
    assert order[:3] == [("A", 0), ("B", 0), ("C", 0)]  # warm-up
    timed = order[3:]
    assert _series(timed) == harness.balanced_series_order(["A", "B", "C"], 3, previous="C")
    assert timed[:2] == [("A", 0), ("A", 1)]
    assert {label: t.iters for label, t in timings.items()} == {"A": 8, "B": 8, "C": 8}
    assert all(t.method == "host-clock, rotated across backends (balanced)" for t in timings.values())


def _marking(pause_s: float = 0.002, mark=lambda call: True):
    """A fake forward + backward: sleeps ``pause_s`` for its 'forward', marks its backward's start when ``mark(call)``,
    sleeps ``pause_s`` again."""
    import time

    count = []

    def step(_):
        time.sleep(pause_s)
        if mark(len(count)):
            harness.mark_backward_start()
        time.sleep(pause_s)
        count.append(1)
    return step


def test_a_series_whose_calls_mark_their_backward_times_it_directly():
    """Every call marks once: the Timing's ``backward`` holds each call's time from the mark on (the second half
    here); a call without a mark, or a series of plain calls, gives none; marks outside a series are ignored."""
    harness.mark_backward_start()  # outside a timed series: nothing happens
    timing = harness.time_fn(_marking(), device="cpu", warmup=1, iters=5)
    assert timing.backward is not None and timing.backward.iters == 5
    assert 1.5 <= timing.backward.median_ms < timing.median_ms
    assert harness.time_fn(_marking(mark=lambda call: call != 3), device="cpu", warmup=0, iters=5).backward is None
    assert harness.time_fn(lambda _: None, device="cpu", warmup=0, iters=3).backward is None
    rotated = harness.time_rotated({"a": _marking(), "b": lambda _: None}, device="cpu", warmup=1, rounds=2, calls=2)
    assert rotated["a"].backward is not None and rotated["a"].backward.iters == 4 and rotated["b"].backward is None


def test_the_layer_problem_marks_its_backward_and_the_bwd_record_keeps_the_direct_time():
    """``LayerProblem.forward_backward`` marks its backward's start, so a timed series of it has a ``backward``;
    ``backward_record`` turns that into ``direct_ms`` / ``direct_tflops`` beside the difference of medians."""
    from mok.bench.cli import backward_record
    from mok.bench.problems import LayerProblem

    shape = MoEShape("tiny", 64, 64, 32, 8, 2)
    problem = LayerProblem(shape, "fp32", torch.device("cpu"), n_sets=1, router=False)
    both = harness.time_fn(problem.calls("torch")["fwd+bwd"], device="cpu", warmup=1, iters=3)
    assert both.backward is not None and both.backward.iters == 3 and 0 < both.backward.median_ms < both.median_ms
    fwd = harness.Timing(both.median_ms / 4, 0, 0, 3, "host-clock")  # a forward shorter than the step: resolved
    record = backward_record(shape, "torch", "fp32", fwd, both, None)
    assert record["direct_ms"] == both.backward.median_ms
    assert record["direct_tflops"] == pytest.approx(harness.tflops(record["flops"], both.backward.median_ms))
    plain = harness.Timing(both.median_ms, both.p10_ms, both.p90_ms, 3, "host-clock")  # no marks: no direct time
    assert "direct_ms" not in backward_record(shape, "torch", "fp32", fwd, plain, None)


def test_time_fn_sizes_the_series_from_the_last_warmup_call():
    """A slow first call (compilation) must not cut the series to ``min_iters``."""
    import time

    calls = []

    def fn(i):
        if not calls:
            time.sleep(0.5)
        calls.append(i)

    timing = harness.time_fn(fn, device="cpu", warmup=2, iters=10, max_seconds=0.5)
    assert timing.iters == 10 and len(calls) == 12


def test_named_backends_without_the_precision_are_skipped_not_failed(monkeypatch):
    import mok.backends as backends
    from mok.bench.cli import select_backends

    # A lazily imported backend whose module is missing (main() rejects names that are no backend at all first).
    monkeypatch.setitem(backends._LAZY_MODULES, "broken", "mok.no_such_module")
    names, skipped = select_backends("torch,broken", torch.device("cpu"), "mxfp8", quick=True)
    assert names == ["broken"]  # does not import: kept, so the results record why
    assert set(skipped) == {"torch"} and "no mxfp8 support" in skipped["torch"]
    names, skipped = select_backends("torch,naive", torch.device("cpu"), "bf16", quick=True)
    assert names == ["torch", "naive"] and not skipped


def test_a_name_that_is_no_backend_stops_the_bench_before_it_runs(capsys):
    """A typo, or SonicMoE named as a backend (round 17 lost a row per shape to ``--backends torch,cuda,sonic``), ends
    the bench at once with the names it knows and, for SonicMoE, how it is asked for."""
    from mok.bench.cli import main, unknown_backends_message

    assert unknown_backends_message("auto") is None and unknown_backends_message("torch,naive") is None
    assert main(["--quick", "--backends", "torch,sonic", "--shapes", "tiny", "--passes", "fwd"]) == 1
    err = capsys.readouterr().err
    assert "'sonic'" in err and "torch" in err and "--sonic" in err
    message = unknown_backends_message("torhc")
    assert "'torhc'" in message and "SonicMoE" not in message


def test_parse_shapes_groups_custom_and_scale():
    shapes = parse_shapes("tiny,anchor-1,128:64:32:8:2", tokens_scale=1.0, ep_size=1)
    assert [s.name for s in shapes][:3] == ["tiny", "tiny-wide", "tiny-top1"]
    assert shapes[3].tokens == 24576 and shapes[-1].hidden == 64
    scaled = parse_shapes("anchor-1", tokens_scale=0.25, ep_size=4)
    assert scaled[0].tokens == 6144 and scaled[0].hidden == 1536


def _run_quick(tmp_path, capsys, monkeypatch, *extra):
    monkeypatch.delenv("OUT", raising=False)
    rc = main(["--quick", "--backends", "torch,naive", "--shapes", "tiny", "--warmup", "0", "--iters", "2",
               "--out", str(tmp_path), *extra])
    return rc, capsys.readouterr()


def test_quick_run_writes_json_and_markdown_with_metadata(tmp_path, capsys, monkeypatch):
    rc, captured = _run_quick(tmp_path, capsys, monkeypatch, "--progress", "on")
    assert rc == 0, captured.out + captured.err
    doc = json.loads((tmp_path / "bench_latest.json").read_text())
    assert doc["schema"] == harness.SCHEMA
    for name in METADATA_FIELDS:
        assert name in doc["metadata"], name
    assert doc["metadata"]["date"] and doc["metadata"]["torch"] and doc["metadata"]["source_digest"]
    keys = {(r["backend"], r["pass"]) for r in doc["results"]}
    assert keys == {("torch", "fwd"), ("torch", "bwd"), ("naive", "fwd"), ("naive", "bwd")}
    fwd = next(r for r in doc["results"] if r["backend"] == "naive" and r["pass"] == "fwd")
    shape = MoEShape("tiny", 64, 64, 32, 8, 2)
    assert fwd["flops"] == shape.forward_flops and fwd["bytes"] == harness.layer_bytes(shape, "fwd")
    assert fwd["ms"] > 0 and fwd["error"] is None and "torch" in fwd["ratios"]
    md = (tmp_path / "bench_latest.md").read_text()
    assert "| shape | T,H,I,E,K |" in md and "Geometric means" in md and "| naive |" in md
    stamped = list(tmp_path.glob("bench_2*.json"))
    assert len(stamped) == 1 and json.loads(stamped[0].read_text()) == doc
    # Non-terminal output: the progress bar goes to stderr, stdout keeps one clean line per result.
    lines = [ln for ln in captured.out.splitlines() if ln.startswith("tiny ")]
    assert len(lines) == 4 and "\r" not in captured.out
    assert all(("ms" in ln and "TFLOP/s" in ln) or "n/a" in ln for ln in lines)


def test_interleaved_run_times_every_backend_and_records_a_failing_one(tmp_path, capsys, monkeypatch):
    """--interleave: a shape's backends are timed in rotation; each still gets its fwd and bwd records and ratios,
    and a backend that fails on its first call is recorded as an error while the others are timed."""
    monkeypatch.delenv("OUT", raising=False)
    register_failing_backend(monkeypatch)
    rc = main(["--quick", "--backends", "torch,naive,failing", "--shapes", "tiny", "--warmup", "0",
               "--iters", "3", "--rounds", "2", "--interleave", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 2, out
    doc = json.loads((tmp_path / "bench_latest.json").read_text())
    timed = [r for r in doc["results"] if r["backend"] in ("torch", "naive") and r["shape"] == "tiny"]
    assert {(r["backend"], r["pass"]) for r in timed} == {("torch", "fwd"), ("torch", "bwd"), ("naive", "fwd"),
                                                          ("naive", "bwd")}
    fwd = next(r for r in timed if r["backend"] == "naive" and r["pass"] == "fwd")
    assert fwd["ms"] > 0 and fwd["iters"] == 4 and "torch" in fwd["ratios"]  # 2 rounds x ceil(3 / 2) calls
    assert all(r["error"] for r in doc["results"] if r["backend"] == "failing")
    assert "rotation" in doc["settings"]["timing"]
    # LayerProblem.forward_backward marks its backward's start: the bwd records carry the direct time too.
    for rec in (r for r in timed if r["pass"] == "bwd" and r["ms"]):
        assert 0 < rec["direct_ms"] and rec["direct_tflops"] > 0
    if any(r.get("direct_ms") for r in timed):
        assert "(direct " in (tmp_path / "bench_latest.md").read_text()


def register_failing_backend(monkeypatch) -> None:
    """A backend named ``failing`` whose every call raises (registered for this test only)."""
    import mok.backends as backends

    def fail(*args, **kwargs):
        raise RuntimeError("this backend always fails")

    monkeypatch.setitem(backends._BACKENDS, "failing", backends.Backend("failing", fail, ("bf16", "fp32"), "fails"))


def test_a_failing_backend_is_recorded_not_raised(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    register_failing_backend(monkeypatch)
    rc = main(["--quick", "--backends", "failing", "--shapes", "tiny", "--passes", "fwd",
               "--warmup", "0", "--iters", "1", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1 and "ERROR" in out and "always fails" in out
    doc = json.loads((tmp_path / "bench_latest.json").read_text())
    assert all(r["error"] for r in doc["results"])


def test_summarize_prints_saved_results(tmp_path, capsys):
    shape = MoEShape("s", 128, 64, 32, 8, 2)
    records = [harness.make_record(shape, name, "bf16", "fwd", harness.Timing(ms, ms, ms, 3, "x"))
               for name, ms in (("torch", 2.0), ("triton", 0.5))]
    doc = harness.result_document(records, harness.collect_metadata("cpu"), {})
    harness.write_json(doc, tmp_path / "r.json")
    assert main(["--summarize", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "geomean triton" in out and "vs_torch=4.00x" in out and out.count("s ") >= 2


def test_train_tiny_moe_quick_is_bitwise_reproducible(tmp_path, capsys, monkeypatch):
    from conftest import load_experiment

    monkeypatch.delenv("OUT", raising=False)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    script = load_experiment("train_tiny_moe.py")
    was_deterministic = torch.are_deterministic_algorithms_enabled()
    try:
        rc = script.main(["--quick", "--backends", "reference", "--steps", "2", "--out", str(tmp_path)])
    finally:  # the script switches on deterministic algorithms for the whole process
        torch.use_deterministic_algorithms(was_deterministic)
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "repeat bit-identical: yes" in out and "EP1 vs EP4 bit-identical: yes" in out
    doc = json.loads((tmp_path / "train_tiny_moe.json").read_text())
    runs = {run["role"]: run for run in doc["runs"]}
    assert runs["first"]["loss_bits"] == runs["repeat"]["loss_bits"] == runs["ep4"]["loss_bits"]
    assert len(runs["first"]["losses"]) == 2 and all(math.isfinite(v) for v in runs["first"]["losses"])


@pytest.mark.gpu
def test_gpu_bench_records_cuda_event_timings(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OUT", raising=False)
    rc = main(["--backends", "torch", "--shapes", "2048:512:256:8:2", "--warmup", "2", "--iters", "5",
               "--no-sonic", "--out", str(tmp_path)])
    assert rc == 0, capsys.readouterr().out
    doc = json.loads((tmp_path / "bench_latest.json").read_text())
    assert doc["metadata"]["gpu"] and doc["metadata"]["sm_count"] > 0
    assert "CUDA events" in doc["settings"]["timing"]
    assert all(r["ms"] and r["ms"] > 0 and r["tflops"] > 0 for r in doc["results"])
    bwd = [r for r in doc["results"] if r["pass"] == "bwd"]
    assert bwd and all(0 < r["direct_ms"] for r in bwd)  # CUDA events at the backward's start
    assert (tmp_path / "bench_latest.png").is_file()


@pytest.mark.gpu
def test_gpu_time_graph_ms_times_the_replays():
    """harness.time_graph_ms captures fn `repeats` times and times the replays: a positive time per call, longer for
    ten times the work, and the captured work really runs, `repeats` times per replay."""
    x = torch.zeros(1 << 20, device="cuda")
    one = harness.time_graph_ms(lambda: x.add_(1.0), iters=20, repeats=4)
    assert float(x[0]) == 1 + 4 * (2 + 20)  # the side-stream call, then 4 per replay: 2 warm-up and 20 timed
    ten = harness.time_graph_ms(lambda: [x.add_(1.0) for _ in range(10)], iters=20, repeats=4)
    torch.cuda.synchronize()
    assert 0 < one < ten and math.isfinite(ten)
    with pytest.raises(ValueError, match="repeats"):
        harness.time_graph_ms(lambda: x.add_(1.0), iters=2, repeats=0)


@pytest.mark.gpu
def test_gpu_tile_gemm_matches_fp64():
    from mok.bench.wave_gemm import tile_gemm
    from mok.heuristics import gemm_tiles

    gen = torch.Generator().manual_seed(0)
    a = torch.randn(300, 7168, generator=gen).to("cuda", torch.bfloat16)
    b = (torch.randn(4096, 7168, generator=gen) * 7168 ** -0.5).to("cuda", torch.bfloat16)
    out = torch.full((300, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)  # poison
    tile_gemm(a, b, out=out)
    want = a.double() @ b.double().T
    assert not out.isnan().any(), "some output tile was never written"
    assert float((out.double() - want).norm() / want.norm()) < 1e-2
    assert gemm_tiles(300, 4096) == 3 * 16  # the programs tile_gemm launched


def test_source_digest_covers_the_cuda_sources(tmp_path):
    """The digest names the code that ran: a change to a kernel header moves it, as a change to Python does (it once
    hashed the .py files alone, so two megakernels read the same digest)."""
    (tmp_path / "mok" / "cuda" / "include").mkdir(parents=True)
    (tmp_path / "mok" / "__init__.py").write_text("")
    header = tmp_path / "mok" / "cuda" / "include" / "kernel.cuh"
    header.write_text("int a;\n")
    before = harness.source_digest(tmp_path)
    header.write_text("int b;\n")
    assert harness.source_digest(tmp_path) != before
    (tmp_path / "mok" / "notes.txt").write_text("not source")
    header.write_text("int a;\n")
    assert harness.source_digest(tmp_path) == before  # other files do not count


class _FakeSonic:
    """Stands in for SonicLayer on the CPU: its fwd+bwd must not run unless --sonic-backward asks for it."""

    backward_calls = 0

    def __init__(self, shape, device, n_sets=1, seed=0):
        pass

    def calls(self):
        def both(i):
            _FakeSonic.backward_calls += 1
            return torch.zeros(1)
        return {"fwd": lambda i: torch.zeros(1), "fwd+bwd": both}


@pytest.mark.parametrize("interleave", [True, False])
def test_sonic_is_timed_forward_only_unless_its_backward_is_asked_for(monkeypatch, interleave):
    """Round 26: SonicMoE's fwd+bwd gave nothing in 460 s at anchor-2, so --passes fwd,bwd times its forward only;
    --sonic-backward adds its backward. The mok backends keep both passes either way."""
    from mok.bench import cli

    monkeypatch.setattr(cli, "SonicLayer", _FakeSonic)
    shape = MoEShape("tiny-sonic", 16, 32, 16, 4, 2)
    for extra, want_sonic_passes in (([], ["fwd"]), (["--sonic-backward"], ["fwd", "bwd"])):
        args = cli.build_parser().parse_args(["--quick", "--max-seconds", "1", *extra])
        args.warmup, args.iters = 1, 3
        _FakeSonic.backward_calls = 0
        if interleave:
            records = cli.run_rotated(shape, ["torch", cli.SONIC_NAME], "bf16", ["fwd", "bwd"], torch.device("cpu"),
                                      args)
        else:
            records = [r for name in ("torch", cli.SONIC_NAME)
                       for r in cli.run_cell(shape, name, "bf16", ["fwd", "bwd"], torch.device("cpu"), args)]
        passes = {name: [r["pass"] for r in records if r["backend"] == name] for name in ("torch", cli.SONIC_NAME)}
        assert not any(r["error"] for r in records), [r["error"] for r in records]
        assert passes["torch"] == ["fwd", "bwd"] and passes[cli.SONIC_NAME] == want_sonic_passes, passes
        assert (_FakeSonic.backward_calls > 0) == ("bwd" in want_sonic_passes)


def test_a_failing_sonic_leaves_records_of_the_passes_it_would_have_run(monkeypatch):
    """SonicMoE that fails to build: an error record per pass it would have been timed on (forward only, unless
    --sonic-backward), in both timing paths alike."""
    from mok.bench import cli

    class Broken:
        def __init__(self, *args, **kwargs):
            raise RuntimeError("no sm_90 here")

    monkeypatch.setattr(cli, "SonicLayer", Broken)
    shape = MoEShape("tiny-sonic", 16, 32, 16, 4, 2)
    for extra, want in (([], ["fwd"]), (["--sonic-backward"], ["fwd", "bwd"])):
        args = cli.build_parser().parse_args(["--quick", *extra])
        args.warmup, args.iters = 1, 3
        for records in (cli.run_cell(shape, cli.SONIC_NAME, "bf16", ["fwd", "bwd"], torch.device("cpu"), args),
                        cli.run_rotated(shape, [cli.SONIC_NAME], "bf16", ["fwd", "bwd"], torch.device("cpu"), args)):
            assert [r["pass"] for r in records] == want and all("no sm_90 here" in r["error"] for r in records)


def test_stack_dumps_print_where_the_bench_is_and_stop_with_it(tmp_path, monkeypatch):
    """--stacks-every: faulthandler prints every thread's stack while the bench runs (where a silent call is stuck),
    and stops when main() returns, so nothing prints after it."""
    import sys
    import time

    from mok.bench import cli

    log = tmp_path / "stacks.txt"
    with open(log, "w") as stream:
        monkeypatch.setattr(sys, "stderr", stream)
        with cli.stack_dumps(0.05):
            time.sleep(0.3)
        printed = log.stat().st_size
        time.sleep(0.2)
    text = log.read_text()
    assert "test_stack_dumps_print_where_the_bench_is_and_stop_with_it" in text  # the sleeping frame, named
    assert log.stat().st_size == printed  # cancelled with the block
    with cli.stack_dumps(0):  # 0: never
        pass
    assert cli.build_parser().parse_args(["--stacks-every", "60"]).stacks_every == 60
