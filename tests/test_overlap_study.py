"""The overlap-granularity study (mok.bench.studies.overlap_study) in small mode: it sweeps minibatch sizes, and the
sweep holds and marks both MoK's two-wave choice and mok's default policy's choice."""

from mok import MoKConfig, heuristics
from mok.bench import studies


def test_small_sweep_marks_the_two_wave_and_the_default_choice():
    doc = studies.overlap_study("small")
    (shape,) = studies.overlap_shapes("small")
    spec = heuristics.device_spec("cpu")
    choice = doc["choices"][shape.name]
    whole = heuristics.whole_layer_policy(shape, spec, MoKConfig(expert_padding=doc["tile"]))
    two_wave = heuristics.minibatch_rows(shape, spec, MoKConfig(expert_padding=doc["tile"], policy="two_wave"))
    default = heuristics.minibatch_rows(shape, spec, MoKConfig(expert_padding=doc["tile"]))
    assert choice["two_wave_rows"] == two_wave and choice["default_rows"] == default
    assert choice["default_policy"] == MoKConfig().policy == "four_wave"
    records = [r for r in doc["results"] if r["shape"] == shape.name]
    assert all(r["ms"] and r["error"] is None for r in records)
    marked_two = [r["minibatch_rows"] for r in records if r["is_two_wave_choice"]]
    marked_default = [r["minibatch_rows"] for r in records if r["is_default_choice"]]
    assert marked_two == [min(two_wave, whole)] and marked_default == [min(default, whole)]
    assert studies.best_and_choice(doc, shape.name)["choice_rows"] == min(two_wave, whole)


def test_candidates_hold_every_policy_choice_capped_at_the_whole_layer():
    sizes = studies.minibatch_candidates(128, (2176, 4224), 17152)
    assert {2176, 4224, 17152} <= set(sizes) and sizes == sorted(set(sizes)) and max(sizes) == 17152
    assert 33792 not in studies.minibatch_candidates(128, (16896, 33792), 20480)  # capped: the whole layer instead
    assert studies.minibatch_candidates(16, (33792, 67584), 160)[-1] == 160
