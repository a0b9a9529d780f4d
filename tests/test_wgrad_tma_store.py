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
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mok.triton_ref import grouped_gemm

found = {}
for tma_store in (False, True):
    for block_p, block_q in ((128, 128), (128, 256)):
        signature = {
            "g_ptr": "*bf16", "stride_g": "i32", "a_ptr": "*bf16", "stride_a": "i32",
            "g_desc": f"tensordesc<bf16[64, {block_p}]>", "a_desc": f"tensordesc<bf16[64, {block_q}]>",
            "out_ptr": "*bf16", "stride_oe": "i32", "stride_op": "i32",
            "out_desc": f"tensordesc<bf16[1, {block_p}, {block_q}]>" if tma_store else "*bf16",
            "chain_ptr": "*fp32", "segment_offsets_ptr": "*i32", "window_start": "i32", "window_end": "i32",
            "load_chain": "i32", "store_final": "i32", "P": "i32", "Q": "i32"}
        const = dict(TILE_ROWS=128, OUT_DTYPE=triton.language.bfloat16, USE_TMA=True, TMA_STORE=tma_store,
                     BLOCK_P=block_p, BLOCK_Q=block_q, BLOCK_R=64, GROUP_P=8)
        signature.update({name: "constexpr" for name in const})
        names = list(signature)
        source = ASTSource(fn=grouped_gemm._grouped_wgrad_kernel, signature=signature,
                           constexprs={(names.index(name),): value for name, value in const.items()})
        kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8, "num_stages": 3})
        ptx = kernel.asm["ptx"]
        found[f"{tma_store} {block_p}x{block_q}"] = {
            "shared": kernel.metadata.shared,
            "bulk_store": "cp.async.bulk.tensor.3d.global.shared" in ptx}
print(json.dumps(found))
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="compiles without a GPU; the GPU runs the kernel itself")
def test_wgrad_tma_store_compiles_to_a_bulk_tensor_store_for_sm90():
    found = compile_in_fresh_process(_SCRIPT)
    assert_sm90_kernels_fit(found, 4)
    for key, kernel in found.items():
        assert kernel["bulk_store"] == key.startswith("True"), (key, kernel)
