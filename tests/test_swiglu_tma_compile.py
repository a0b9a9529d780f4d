"""swiglu.py's bf16 kernels with TMA operand loads (``TileConfig.tma``, opt-in), compiled (not interpreted) for sm_90
in a fresh process at the tilings the tuning sweeps try: the operands arrive by bulk tensor copies (a 2-D one for
the window's rows, a 3-D one per weight), within Hopper's shared memory, without spills. Their bits under the
interpreter: tests/test_swiglu_tma.py."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_sm90_kernels_fit, compile_in_fresh_process

_SCRIPT = r"""
import json
import triton
from mok.triton_ref import swiglu
from sm90_compile import compile_sm90

BF16 = triton.language.bfloat16
BY_TMA = {"rows_by_tma": "cp.async.bulk.tensor.2d", "weights_by_tma": "cp.async.bulk.tensor.3d"}


def desc(tma, *block):
    return f"tensordesc<bf16[{', '.join(map(str, block))}]>" if tma else "*bf16"


found = {}
for tma, group_m, num_stages in ((False, 16, 3), (True, 16, 3), (True, 8, 4)):   # gate/up: 128 x (128 + 128) x 64
    found[f"gate_up {tma} s{num_stages}"] = compile_sm90(swiglu._gate_up_swiglu_kernel, {
        "x_ptr": "*bf16", "wg_ptr": "*bf16", "wu_ptr": "*bf16", "gate_up_ptr": "*bf16", "h_ptr": "*bf16",
        "x_desc": desc(tma, 128, 64), "wg_desc": desc(tma, 1, 128, 64), "wu_desc": desc(tma, 1, 128, 64)},
        dict(TILE_ROWS=128, STORE_H=True, ACT_DTYPE=BF16, MX=False, USE_TMA=tma,
             BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=group_m), num_stages=num_stages, find=BY_TMA)
for tma, num_stages in ((False, 4), (True, 4), (True, 3)):                        # down dgrad: 128 x 128 x 64
    found[f"down_dgrad {tma} s{num_stages}"] = compile_sm90(swiglu._down_dgrad_swiglu_backward_kernel, {
        "dout_ptr": "*bf16", "wd_ptr": "*bf16", "weight_ptr": "*fp32", "gate_up_ptr": "*bf16",
        "d_gate_up_ptr": "*bf16", "hw_ptr": "*bf16", "dw_partial_ptr": "*fp32",
        "dout_desc": desc(tma, 128, 64), "wd_desc": desc(tma, 1, 64, 128)},
        dict(TILE_ROWS=128, ACT_DTYPE=BF16, MX=False, USE_TMA=tma,
             BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8), num_stages=num_stages, find=BY_TMA)
print(json.dumps(found))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="compiles without a GPU; the GPU runs the kernels themselves")
def test_swiglu_tma_loads_compile_to_bulk_tensor_copies_for_sm90():
    found = compile_in_fresh_process(_SCRIPT)
    assert_sm90_kernels_fit(found, 6)
    for key, kernel in found.items():
        tma = " True " in key
        assert kernel["rows_by_tma"] == kernel["weights_by_tma"] == tma, (key, kernel)
