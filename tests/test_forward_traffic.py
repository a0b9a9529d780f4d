"""experiments/forward_traffic.py turns Nsight Compute's raw CSV into per-kernel bytes and sums (no GPU, no ncu)."""

from __future__ import annotations

import json
import math

import pytest
from conftest import load_experiment

# The raw page's shape: a header, a units row (ID empty), one row per kernel; ncu may scale units per column.
CSV = '''==PROF== Disconnected from process 1234
"ID","Process ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum","lts__t_bytes.sum","sm__cycles_elapsed.avg.per_second","smsp__inst_executed.sum"
"","","","Gbyte","Mbyte","usecond","byte","cycle/nsecond","inst"
"0","1234","sm90_moe_forward_kernel","4.5","1,250.5","6,100.25","9000000000","1.61","2500000000"
"1","1234","sm90_moe_sum_kernel","4.25","300","1,100","5000000000","1.70","400000000"
'''


def load_script():
    return load_experiment("forward_traffic.py")


def test_rows_are_converted_through_the_units_row():
    rows = load_script().kernel_rows(CSV)
    assert [row["kernel"] for row in rows] == ["sm90_moe_forward_kernel", "sm90_moe_sum_kernel"]
    first = rows[0]
    assert math.isclose(first["DRAM read GB"], 4.5)
    assert math.isclose(first["DRAM write GB"], 1.2505)  # Mbyte, thousands separator
    assert math.isclose(first["us"], 6100.25)
    assert math.isclose(first["L2 GB"], 9.0)
    assert math.isclose(first["SM MHz"], 1610.0)  # cycle/nsecond is GHz
    assert math.isclose(first["G instructions"], 2.5)


def test_totals_sum_the_bytes_and_weight_the_clock_by_time():
    script = load_script()
    sums = script.totals(script.kernel_rows(CSV))
    assert math.isclose(sums["DRAM read GB"], 8.75) and math.isclose(sums["us"], 7200.25)
    assert math.isclose(sums["SM MHz"], (1610 * 6100.25 + 1700 * 1100) / 7200.25)
    assert sums["kernels"] == 2
    table = script.table("anchor-2: cuda", script.kernel_rows(CSV)).splitlines()
    assert table[-1].startswith("| **all 2 kernels** | 7200.250 | 8.750 |")


@pytest.mark.parametrize("unit, factor", [("byte", 1.0), ("Kbyte", 1e3), ("Gbyte", 1e9), ("nsecond", 1e-9),
                                          ("msecond", 1e-3), ("cycle/usecond", 1e6), ("cycle/second", 1.0),
                                          ("Mhz", 1e6), ("Kinst", 1e3), ("ns", 1e-9), ("us", 1e-6)])
def test_units(unit, factor):
    assert load_script().si_factor(unit) == factor


def test_an_unknown_unit_is_refused():
    with pytest.raises(ValueError, match="furlong"):
        load_script().si_factor("furlong")


def test_kernels_are_grouped_into_parts_and_plotted(tmp_path):
    """Each forward splits into its GEMMs (the megakernel or SonicMoE's grouped GEMMs), its sum and the rest; the
    plot draws saved reports (a PNG comes out)."""
    pytest.importorskip("matplotlib")
    script = load_script()
    assert script.kernel_part("void mok::sm90_moe_forward_kernel<mok::Sm90Tiles, 1, 0>(...)") == "GEMMs"
    assert script.kernel_part("kernel_cutlass_kernel_quackgemm_actGemmGatedSm90_object_at_") == "GEMMs"
    assert script.kernel_part("mok::sm90_moe_sum_kernel(mok::Sm90MoeParams)") == "sum"
    assert script.kernel_part("token_gather_sum_kernel") == "sum"
    assert script.kernel_part("mok::<unnamed>::router_topk_kernel<8>") == "routing"
    rows = script.kernel_rows(CSV)
    assert script.parts(rows, "DRAM read GB") == pytest.approx({"GEMMs": 4.5, "sum": 4.25, "routing": 0.0})
    report = tmp_path / "traffic_anchor-2_cuda_mb8192.json"
    report.write_text(json.dumps({"shape": "anchor-2", "rows": rows, "totals": script.totals(rows)}))
    out = tmp_path / "traffic.png"
    assert script.main(["--plot", str(out), str(report)]) == 0
    assert out.stat().st_size > 1000


def test_config_options_and_one_shape_for_a_report():
    """--config KEY=VALUE goes through ab_kernels.py's parser (MoKConfig fields: ints stay ints)."""
    script = load_script()
    assert script.parse_options(["policy=whole", "minibatch_rows=8192"]) == {"policy": "whole",
                                                                              "minibatch_rows": 8192}
    with pytest.raises(ValueError):
        script.parse_options(["minibatch_rows"])
    with pytest.raises(SystemExit):
        script.main(["anchor-2", "anchor-3", "--report", "x.ncu-rep"])


def _tiny_shape():
    from mok.config import MoEShape
    # 1,024 routed rows over 2 experts: 512 per expert, 4 row tiles of 128; gate/up N = 2I = 512 (2 column tiles of
    # 256), down N = H = 256 (1 column tile), both K = 256.
    return MoEShape("tiny-model", tokens=512, hidden=256, intermediate=256, num_experts=2, top_k=2)


def test_model_counts_every_tile_load_of_both_gemms():
    """Each tile of 128 x 256 reads a 128 x K slice of A and a 256 x K slice of B (bf16); h and y are written once
    per padded row; the ring copy reads and writes each routed row once."""
    script = load_script()
    parts = script.modelled_l2_bytes(_tiny_shape())
    experts, row_tiles, k = 2, 4, 256
    expect = {
        "gate/up A": experts * row_tiles * 2 * 128 * k * 2,  # 2 column tiles re-read each row tile
        "gate/up B": experts * row_tiles * 2 * 256 * k * 2,
        "down A": experts * row_tiles * 1 * 128 * k * 2,
        "down B": experts * row_tiles * 1 * 256 * k * 2,
        "h and y writes": 1024 * 256 * 2 + 1024 * 256 * 2,
        "ring copy": 2 * 1024 * 256 * 2,
    }
    for name, value in expect.items():
        assert parts[name] == pytest.approx(value * 1e-9), name
    assert parts["modelled"] == pytest.approx(sum(expect.values()) * 1e-9)
    assert script.modelled_l2_bytes(_tiny_shape(), ring_copy=False)["ring copy"] == 0


def test_model_multicast_halves_the_shared_operand_and_a_span_shares_a():
    script = load_script()
    plain = script.modelled_l2_bytes(_tiny_shape())
    # Clusters of 2 along M share B; along N they share A.
    along_m = script.GemmTiles(128, 256, cluster_m=2)
    along_n = script.GemmTiles(128, 256, cluster_n=2)
    clustered = script.modelled_l2_bytes(_tiny_shape(), (along_m, along_n))
    assert clustered["gate/up B"] == pytest.approx(plain["gate/up B"] / 2)
    assert clustered["gate/up A"] == pytest.approx(plain["gate/up A"])
    assert clustered["down A"] == pytest.approx(plain["down A"] / 2)
    assert clustered["down B"] == pytest.approx(plain["down B"])
    # A down task over 2 column blocks that loads its A tile once (a shape with 4 down column tiles).
    from mok.config import MoEShape
    wide = MoEShape("wide", tokens=512, hidden=1024, intermediate=256, num_experts=2, top_k=2)
    assert script.modelled_l2_bytes(wide, down_a_span=2)["down A"] == pytest.approx(
        script.modelled_l2_bytes(wide)["down A"] / 2)
    # SonicMoE keeps the 2I outputs before its SwiGLU: h's write counts three times.
    preact = script.modelled_l2_bytes(_tiny_shape(), saved_preact=True)
    assert preact["h and y writes"] - plain["h and y writes"] == pytest.approx(2 * 1024 * 256 * 2 * 1e-9)


def test_megakernel_down_span_shares_a_only_where_the_k_blocks_fit_the_stages():
    script = load_script()
    from mok.config import get_shape
    assert script.megakernel_down_a_span(get_shape("anchor-2"), "gather") == 8  # I = 256: 4 K blocks, 4 stages
    assert script.megakernel_down_a_span(get_shape("anchor-3"), "ring") == 1    # I = 1,024: 16 K blocks


def test_explain_sets_each_report_beside_its_model(tmp_path, capsys):
    """The backend comes from the report's name: SonicMoE with its clusters and no ring, the megakernel in its
    default dispatch (ring at anchor-3) or in gather mode when the tag says so. The ratio divides the GEMMs' L2 bytes
    by the model plus their DRAM bytes. A tag with "clusters": the megakernel's gate/up weights multicast in pairs."""
    script = load_script()
    rows = [{"kernel": "void mok::sm90_moe_forward_kernel<...>", "L2 GB": 50.0, "DRAM read GB": 6.0,
             "DRAM write GB": 3.0},
            {"kernel": "mok::sm90_moe_sum_kernel(mok::Sm90MoeParams)", "L2 GB": 2.0, "DRAM read GB": 1.0}]
    paths = []
    for name in ("cuda", "cuda_gather", "sonicmoe", "cuda_clusters"):
        path = tmp_path / f"traffic_anchor-3_{name}.json"
        path.write_text(json.dumps({"shape": "anchor-3", "rows": rows}))
        paths.append(path)
    ring, gather, sonic, clusters = (script.report_model(path) for path in paths)
    # In clusters the megakernel's gate/up pairs read the weights half as often, and nothing else changes.
    assert clusters["gate/up B"] == pytest.approx(ring["gate/up B"] / 2)
    assert clusters["modelled"] == pytest.approx(ring["modelled"] - ring["gate/up B"] / 2)
    assert ring["measured L2"] == 50.0 and ring["DRAM"] == 9.0  # the GEMMs' part only
    assert ring["ring copy"] > 0 and gather["ring copy"] == 0
    assert ring["modelled"] - gather["modelled"] == pytest.approx(ring["ring copy"])
    assert sonic["gate/up B"] == pytest.approx(ring["gate/up B"] / 2) and sonic["ring copy"] == 0
    assert ring["measured / (modelled + DRAM)"] == pytest.approx(50.0 / (ring["modelled"] + 9.0))
    assert script.main(["--explain", *map(str, paths[:3])]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| report | measured L2 | DRAM |") and len(out) == 5
    assert out[2].startswith("| anchor-3 cuda | 50.00 | 9.00 |") and out[4].startswith("| anchor-3 sonicmoe |")
