"""experiments/pull_order_bench.py end to end at a tiny shape (the interpreter on a CPU): both orders checked
bitwise, timed, the tilings swept, and the JSON and table written."""

from __future__ import annotations

import json

from conftest import load_experiment


def test_pull_order_bench_runs_and_reports(tmp_path, monkeypatch):
    bench = load_experiment("pull_order_bench.py")
    monkeypatch.setattr(bench, "SWEEP", bench.SWEEP[:2])
    out_json, out_md, out_png = tmp_path / "pull.json", tmp_path / "pull.md", tmp_path / "pull.png"
    assert bench.main(["--shapes", "tiny-wide", "--ep", "2", "--rounds", "1", "--iters", "1", "--sweep",
                       "--json", str(out_json), "--md", str(out_md), "--plot", str(out_png)]) == 0
    assert out_png.stat().st_size > 0
    report = json.loads(out_json.read_text())
    rows = report["results"]
    assert {(r["pull"], r["order"]) for r in rows} == {(p, o) for p in bench.PULLS for o in bench.ORDERS}
    assert all(r["ms"] > 0 and r["written_gb"] > 0 for r in rows)
    token = next(r for r in rows if r["order"] == "token" and r["pull"] == "x")
    row = next(r for r in rows if r["order"] == "row" and r["pull"] == "x")
    assert token["read_gb"] < row["read_gb"]  # top-4: tokens with several rows on a rank are read once
    assert [(s["block_tokens"], s["block_cols"]) for s in report["sweep"]] == [t[:2] for t in bench.SWEEP]
    assert all(s["bitwise_equal"] for s in report["sweep"])
    assert "By-token tilings" in out_md.read_text()
