"""experiments/profile_forward.py's GPU-timeline arithmetic (busy time and idle gaps of overlapping kernel
intervals), checked without a GPU; its argument parsing too."""

from __future__ import annotations


import pytest

from conftest import load_experiment



def load_script():
    return load_experiment("profile_forward.py")


def test_busy_time_merges_overlaps_and_gaps_come_longest_first():
    merged_busy = load_script().merged_busy
    # a [0, 10), b [5, 12) overlaps a, c [20, 25), d [26, 30): busy 12 + 5 + 4, gaps 8 (b -> c) and 1 (c -> d).
    busy, gaps = merged_busy([(20, 25, "c"), (0, 10, "a"), (26, 30, "d"), (5, 12, "b")])
    assert busy == 21
    assert gaps == [(8, "b", "c"), (1, "c", "d")]


def test_an_interval_inside_another_keeps_the_outer_name_and_end():
    busy, gaps = load_script().merged_busy([(0, 10, "outer"), (2, 3, "inner"), (15, 16, "next")])
    assert busy == 11
    assert gaps == [(5, "outer", "next")]


def test_no_intervals():
    assert load_script().merged_busy([]) == (0.0, [])


def test_needs_a_shape():
    with pytest.raises(SystemExit):
        load_script().main([])


def test_kernel_table_sums_each_name_per_call_most_time_first():
    table = load_script().kernel_table([(0, 4, "gemm"), (4, 5, "topk"), (10, 16, "gemm"), (16, 18, "topk")], calls=2)
    assert table == [{"name": "gemm", "time_per_call": 5.0, "launches_per_call": 1.0},
                     {"name": "topk", "time_per_call": 1.5, "launches_per_call": 1.0}]


def test_layer_pieces_group_kernels_and_split_the_megakernel_by_its_timeline():
    script = load_script()
    sonic = [{"name": "kernel_cutlass_kernel_quackgemm_actGemmGatedSm90_x", "time_per_call": 3.6},
             {"name": "kernel_cutlass_kernel_quackgemm_default_epiGemmDefaultSm90_x", "time_per_call": 2.2},
             {"name": "token_gather_sum_kernel", "time_per_call": 1.0},
             {"name": "nvjet_sm90_tst_128x256", "time_per_call": 0.1}, {"name": "softmax", "time_per_call": 0.05}]
    assert script.layer_pieces(sonic) == pytest.approx({"gate/up GEMM": 3.6, "down GEMM": 2.2, "weighted sum": 1.0,
                                                        "router and routing": 0.15})
    mega = [{"name": "void mok::sm90::sm90_moe_forward_kernel<...>", "time_per_call": 10.0},
            {"name": "router_topk_kernel", "time_per_call": 0.2}]
    kinds = {"gate_up": {"share": 0.5}, "down": {"share": 0.3}, "combine": {"share": 0.15}, "dispatch": {"share": 0.04}}
    pieces = script.layer_pieces(mega, kinds)
    assert list(pieces) == ["gate/up GEMM", "down GEMM", "weighted sum", "dispatch", "megakernel head and tail",
                            "router and routing"]
    assert pieces["gate/up GEMM"] == 5.0 and pieces["dispatch"] == 0.4 and pieces["router and routing"] == 0.2
    assert pieces["megakernel head and tail"] == pytest.approx(0.1)
    assert sum(pieces.values()) == pytest.approx(10.2)  # every kernel's time, nothing dropped
    assert script.layer_pieces(mega) == {"megakernel": 10.0, "router and routing": 0.2}  # no timeline: kept whole
    # The sum as a kernel of its own (round 34) is the weighted sum, beside any combine tasks' share of the megakernel.
    with_sum = mega + [{"name": "mok::sm90::sm90_moe_sum_kernel(mok::sm90::Sm90MoeParams)", "time_per_call": 1.1}]
    assert script.layer_pieces(with_sum, kinds)["weighted sum"] == pytest.approx(1.1 + 1.5)
    assert script.layer_pieces(with_sum)["weighted sum"] == pytest.approx(1.1)


def test_records_read_back_from_a_printed_log():
    script = load_script()
    log = """loaded mok_sm90_89f4470c7462aec1: shared memory 232448 bytes per CTA
anchor-3 cuda: bench fwd 5.509 ms (598.7 TFLOP/s), no_grad 6.039 ms (546.2 TFLOP/s), no router (no_grad) 6.030 ms (547.0 TFLOP/s)
/opt/torch/.venv/lib/python3.12/site-packages/torch/profiler/profiler.py:224: UserWarning: Warning: Profiler clears
  profiled 4 calls back to back: GPU span 5.936 ms per call, busy 5.481 ms, idle 0.455 ms
  kernels by GPU time per call (us, launches per call):
        5025.0   1.0  void mok::sm90::sm90_moe_forward_kernel<mok::sm90::Sm90Tiles, true, false>(mok::sm90::Sm90MoePar
         345.9   1.0  mok::sm90::sm90_moe_sum_kernel(mok::sm90::Sm90MoeParams)
           8.3   1.0  router_topk_kernel
  longest idle gaps (us, kernel before -> kernel after):
         674.6  mok::sm90::(anonymous namespace)::schedule_rows_ke -> mok::sm90::sm90_moe_reset_kernel(int*, int, int*,
  anchor-3 cuda: one bench forward: 0 synchronising CUDA call(s)
anchor-3 sonicmoe: bench fwd 5.423 ms (608.3 TFLOP/s), no_grad 5.652 ms (583.6 TFLOP/s)
  profiled 4 calls back to back: GPU span 6.096 ms per call, busy 5.657 ms, idle 0.439 ms
  kernels by GPU time per call (us, launches per call):
        3655.3   1.0  kernel_cutlass_kernel_quackgemm_actGemmGatedSm90_object_at__TiledMMA
        1538.7   1.0  kernel_cutlass_kernel_quackgemm_default_epiGemmDefaultSm90_object_at__TiledMMA
         308.3   1.0  token_gather_sum_kernel
          10.5   2.0  void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda
  longest idle gaps (us, kernel before -> kernel after):
         592.8  nvjet_sm90_tst_64x256_64x5_1x2_h_bz_TNN -> kernel_cutlass_kernel_sonicmoefunctionaltopkSoftma
"""
    cuda, sonic = script.records_from_log(log)
    assert (cuda["shape"], cuda["backend"], sonic["backend"]) == ("anchor-3", "cuda", "sonicmoe")
    assert cuda["times_ms"] == {"bench fwd": 5.509, "no_grad": 6.039, "no router (no_grad)": 6.030}
    assert sonic["times_ms"] == {"bench fwd": 5.423, "no_grad": 5.652}
    assert cuda["span_us"] == pytest.approx(5936.0) and cuda["busy_us"] == pytest.approx(5481.0)
    # the kernel tables stop at the gaps' heading: no gap row is read as a kernel
    assert [row["time_per_call"] for row in cuda["kernels_us"]] == [5025.0, 345.9, 8.3]
    assert sonic["kernels_us"][3] == {"name": "void at::native::unrolled_elementwise_kernel<at::native::"
                                              "direct_copy_kernel_cuda", "time_per_call": 10.5,
                                      "launches_per_call": 2.0}
    assert script.layer_pieces(cuda["kernels_us"]) == pytest.approx(
        {"weighted sum": 345.9, "megakernel": 5025.0, "router and routing": 8.3})
    assert script.layer_pieces(sonic["kernels_us"]) == pytest.approx(
        {"gate/up GEMM": 3655.3, "down GEMM": 1538.7, "weighted sum": 308.3, "router and routing": 10.5})
