"""One Triton kernel compiled for sm_90 (not interpreted), and what its PTX holds: the helper that the compile
tests' scripts import in their fresh processes (:func:`conftest.compile_in_fresh_process` puts this folder on their
path). Needs no GPU, only the ptxas that Triton ships."""

from __future__ import annotations

import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.backends.nvidia.compiler import get_ptxas
from triton.compiler import ASTSource


def compile_sm90(fn, types: dict, const: dict, *, num_warps: int = 8, num_stages: int = 3,
                 find: dict | None = None) -> dict:
    """Compile ``fn`` (a ``@triton.jit`` kernel) for sm_90 with the argument ``types`` given (the others: ``*i32``
    for names ending in ``_ptr``, else ``i32``) and the constexpr values ``const``. Every integer and pointer argument
    is marked divisible by 16, as the real launches specialise them (without that hint pointer loads are not
    vectorised, and some kernels spill).

    Returns ``{"shared": bytes of shared memory, "no_spills": ptxas -v reports no spill stores}`` and, for each
    ``name: text`` of ``find``, whether the PTX holds ``text``.
    """
    signature = {name: "constexpr" if name in const else types.get(name, "*i32" if name.endswith("_ptr") else "i32")
                 for name in fn.arg_names}
    names = list(signature)
    source = ASTSource(fn=fn, signature=signature, constexprs={(names.index(k),): v for k, v in const.items()},
                       attrs={(names.index(k),): [["tt.divisibility", 16]]
                              for k, v in signature.items() if v != "constexpr" and not v.startswith("tensordesc")})
    kernel = triton.compile(source, target=GPUTarget("cuda", 90, 32),
                            options={"num_warps": num_warps, "num_stages": num_stages})
    ptx = kernel.asm["ptx"]
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        report = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o", "/dev/null"],
                                capture_output=True, text=True, check=True).stderr
    return {"shared": kernel.metadata.shared, "no_spills": "0 bytes spill stores" in report,
            **{name: text in ptx for name, text in (find or {}).items()}}
