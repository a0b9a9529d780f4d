"""experiments/ncu_gemm_gap.py turns Nsight Compute's details CSV into its table (no GPU, no ncu needed)."""

from __future__ import annotations

from conftest import load_experiment

CSV = '''"ID","Kernel Name","Section Name","Metric Name","Metric Unit","Metric Value"
"0","sm90_moe_forward_kernel","GPU Speed Of Light Throughput","Duration","ms","10.78"
"0","sm90_moe_forward_kernel","GPU Speed Of Light Throughput","Compute (SM) Throughput","%","74.03"
"0","sm90_moe_forward_kernel","Command line profiler metrics","sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active","%","61.5"
"0","sm90_moe_forward_kernel","Command line profiler metrics","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","","2.34"
"0","sm90_moe_forward_kernel","Command line profiler metrics","smsp__average_warps_issue_stalled_wait_per_issue_active.ratio","","1.98"
"1","device_kernel","GPU Speed Of Light Throughput","Duration","ms","3.08"
"1","device_kernel","Command line profiler metrics","smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio","","6.33"
'''


def load_script():
    return load_experiment("ncu_gemm_gap.py")


def test_table_rows_columns_and_stalls():
    table = load_script().summarize_csv(CSV).splitlines()
    head = table[0]
    # Reported columns only: duration, SM %, the tensor pipe; none of the metrics no kernel has.
    assert "duration" in head and "SM %" in head and "tensor pipe %" in head
    assert "DRAM %" not in head and "gmma" not in head
    first, second = table[2], table[3]
    assert first.startswith("| 0 | sm90_moe_forward_kernel | 10.78 ms | 74.03 % | 61.5 % |")
    assert first.index("barrier") < first.index("wait")  # stalls, largest first
    assert second.startswith("| 1 | device_kernel | 3.08 ms | - | - |") and "long_scoreboard" in second
