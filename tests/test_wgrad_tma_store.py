"""The weight-gradient kernel's TMA store (``TileConfig.tma_store``, opt-in since round 27), compiled (not
interpreted) for sm_90 in a fresh process: the store becomes one bulk tensor copy from shared memory, at the tilings
the tuning sweeps try. Its bits under the interpreter: tests/test_triton_kernels.py."""

from __future__ import annotations

import pytest
import torch

from conftest import assert_sm90_kernels_fit, compile_in_fresh_process

_SCRIPT = r"""
import json
import triton
from mok.triton_ref import grouped_gemm
from sm90_compile import compile_sm90

found = {}
for tma_store in (False, True):
    for block_p, block_q in ((128, 128), (128, 256)):
        types = {"g_ptr": "*bf16", "a_ptr": "*bf16", "out_ptr": "*bf16", "chain_ptr": "*fp32",
                 "g_desc": f"tensordesc<bf16[64, {block_p}]>", "a_desc": f"tensordesc<bf16[64, {block_q}]>",
                 "out_desc": f"tensordesc<bf16[1, {block_p}, {block_q}]>" if tma_store else "*bf16"}
        const = dict(TILE_ROWS=128, OUT_DTYPE=triton.language.bfloat16, USE_TMA=True, TMA_STORE=tma_store,
                     BLOCK_P=block_p, BLOCK_Q=block_q, BLOCK_R=64, GROUP_P=8)
        found[f"{tma_store} {block_p}x{block_q}"] = compile_sm90(
            grouped_gemm._grouped_wgrad_kernel, types, const,
            find={"bulk_store": "cp.async.bulk.tensor.3d.global.shared"})
print(json.dumps(found))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="compiles without a GPU; the GPU runs the kernel itself")
def test_wgrad_tma_store_compiles_to_a_bulk_tensor_store_for_sm90():
    found = compile_in_fresh_process(_SCRIPT)
    assert_sm90_kernels_fit(found, 4)
    for key, kernel in found.items():
        assert kernel["bulk_store"] == key.startswith("True"), (key, kernel)
