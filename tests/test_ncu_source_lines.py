"""experiments/ncu_source_lines.py on a hand-made ncu CSV and nvdisasm listing (no GPU, no nvcc)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "experiments"))

import ncu_source_lines as nsl  # noqa: E402

KERNEL = "void mok::sm90::sm90_moe_forward_kernel<mok::sm90::Sm90Tiles, (bool)1, (bool)1>(mok::sm90::Sm90MoeParams)"
HEADER = ('"Address","Source","Warp Stall Sampling (All Samples)","Instructions Executed","stall_long_sb",'
          '"stall_wait","stall_long_sb (Not Issued)"')


def csv_text(rows: list[tuple[str, int, int, int, int]], name: str = KERNEL) -> str:
    """An ncu source CSV of one kernel: (instruction, samples, executed, long_sb, wait) per row."""
    lines = [f'"Kernel Name","{name}",', HEADER]
    for i, (source, samples, executed, long_sb, wait) in enumerate(rows):
        lines.append(f'"0x{i * 16:x}","{source}","{samples}","{executed:,}","{long_sb}","{wait}","999"')
    return "\n".join(lines) + "\n"


LISTING = """\
.text._ZN3mok4sm9023sm90_moe_forward_kernelINS0_9Sm90TilesELb1ELb0EEEvNS0_13Sm90MoeParamsE:
	//## File "/r/mok/cuda/include/mok/gemm_mainloop.cuh", line 9
        /*0000*/                   NOP ;
.text._ZN3mok4sm9023sm90_moe_forward_kernelINS0_9Sm90TilesELb1ELb1EEEvNS0_13Sm90MoeParamsE:
	//## File "/r/mok/cuda/include/mok/gemm_mainloop.cuh", line 337
        /*0000*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;
	//## File "/r/mok/cuda/include/mok/sync.cuh", line 241
        /*0010*/               @!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2 ;
	//## File "/r/mok/cuda/include/mok/gemm_mainloop.cuh", line 282
        /*0020*/                   ISETP.NE.AND P1, PT, R3, RZ, PT ;
	//## File "/r/mok/cuda/include/mok/sync.cuh", line 241
        /*0030*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5], R2 ;
"""

ROWS = [("IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28]", 10, 1000, 0, 10),
        ("@!P0 SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R2", 60, 2000, 50, 10),
        ("ISETP.NE.AND P1, PT, R3, RZ, PT", 0, 500, 0, 0),
        ("SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR5], R2", 30, 500, 30, 0)]


def test_function_tag_from_the_demangled_name():
    assert nsl.function_tag(KERNEL) == "Lb1ELb1E"
    with pytest.raises(ValueError):
        nsl.function_tag("void other_kernel(int)")


def test_sections_and_listing_are_read():
    text = csv_text(ROWS) + csv_text(ROWS[:1], name=KERNEL.replace("(bool)1>", "(bool)0>"))
    sections = nsl.read_sections(text)
    assert [len(s.rows) for s in sections] == [4, 1]
    assert sections[0].rows[1][nsl.INSTRUCTIONS] == "2,000"
    listing = nsl.read_listing(LISTING, nsl.function_tag(sections[0].name))
    assert [(x.offset, x.where) for x in listing] == [(0, ("gemm_mainloop.cuh", 337)), (16, ("sync.cuh", 241)),
                                                      (32, ("gemm_mainloop.cuh", 282)), (48, ("sync.cuh", 241))]
    assert nsl.opcode(listing[1].text) == "SYNCS" and nsl.opcode(ROWS[0][0]) == "IMAD"


def test_sums_by_line_and_by_the_inlining_line():
    pairs = nsl.join(nsl.read_listing(LISTING, "Lb1ELb1E"), nsl.read_sections(csv_text(ROWS))[0].rows)
    lines = nsl.by_line(pairs)
    assert lines[(("sync.cuh", 241),)] == [2500.0, 90.0]
    assert lines[(("gemm_mainloop.cuh", 337),)] == [1000.0, 10.0]
    callers = nsl.by_line(pairs, with_caller=True)
    # The same wait, split between the consumer's mainloop (line 337) and the producer's loop (line 282).
    assert callers[(("sync.cuh", 241), ("gemm_mainloop.cuh", 337))] == [2000.0, 60.0]
    assert callers[(("sync.cuh", 241), ("gemm_mainloop.cuh", 282))] == [500.0, 30.0]
    assert nsl.stall_reasons(pairs)[("sync.cuh", 241)] == "long_sb 89%, wait 11%"
    text = nsl.table(callers, 1, 2)
    assert "sync.cuh:241 <- gemm_mainloop.cuh:337 | 0.00 M | 50.0% | 60.0%" in text


def test_a_different_build_is_refused():
    listing = nsl.read_listing(LISTING, "Lb1ELb1E")
    rows = nsl.read_sections(csv_text(ROWS))[0].rows
    with pytest.raises(ValueError, match="not the same build"):
        nsl.join(listing[:3], rows)
    swapped = [dict(r) for r in rows]
    swapped[0]["Source"], swapped[2]["Source"] = rows[2]["Source"], rows[0]["Source"]
    with pytest.raises(ValueError, match="opcodes differ"):
        nsl.join(listing, swapped)


def test_plot_draws_both_kernels(tmp_path):
    pytest.importorskip("matplotlib")
    pairs = nsl.join(nsl.read_listing(LISTING, "Lb1ELb1E"), nsl.read_sections(csv_text(ROWS))[0].rows)
    callers = nsl.by_line(pairs, with_caller=True)
    other = {key: [i, s / 2] for key, (i, s) in callers.items()}
    path = tmp_path / "shares.png"
    nsl.plot_shares({"gather": callers, "ring": other}, path, top=3, title="t")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
