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
