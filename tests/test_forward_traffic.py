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
