"""Building the SM90 megakernel.

Two ways, one set of flags:

* :func:`load_extension`: the torch extension for the GPU, JIT-built with ``torch.utils.cpp_extension.load``
  (ninja), cached under ``$MOK_CUDA_CACHE`` (default ``~/.cache/mok``). The cache key is a hash of every
  source and header under ``mok/cuda`` plus the flags, so an edited header always rebuilds. ``source_root``
  builds another copy of ``include/`` and ``csrc/`` (e.g. with a candidate patch applied) as a second, separately
  named extension in the same process, so two kernel versions can be timed against each other interleaved
  (experiments/ab_kernels.py).
* :func:`compile_object`: plain ``nvcc -c`` of ``csrc/sm90_moe_forward.cu`` (no torch), for CI on a machine
  without a GPU; :func:`resource_usage` adds ``-Xptxas -v`` and returns the register/spill/shared-memory
  report; :func:`disassemble` runs cuobjdump (the one shipped in the triton wheel, or on PATH).

Environment: ``MOK_CUDA_VERBOSE=1`` (build log and ptxas -v), ``MOK_CUDA_LINEINFO=1`` (``-lineinfo``, for
compute-sanitizer and profilers), ``MOK_CUDA_CACHE`` (cache directory).

The kernel needs no CUTLASS header today (its wgmma, TMA and mbarrier wrappers are hand-written PTX); the
nvidia-cutlass wheel's include directories are still passed when present so CuTe pieces can be adopted
without touching the build.

Command line: ``python -m mok.cuda.build [--compile OUT.o] [--resources] [--sass]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE_DIR / "include"
CSRC_DIR = PACKAGE_DIR / "csrc"
KERNEL_SOURCE = CSRC_DIR / "sm90_moe_forward.cu"
SCHEDULE_SOURCE = CSRC_DIR / "schedule_tables.cu"
ROUTER_TOPK_SOURCE = CSRC_DIR / "router_topk.cu"
BINDING_SOURCE = CSRC_DIR / "binding.cpp"

ARCH_FLAGS = ["-gencode=arch=compute_90a,code=sm_90a"]
NVCC_FLAGS = [*ARCH_FLAGS, "-std=c++17", "--expt-relaxed-constexpr", "-O3"]

_EXTENSIONS: dict[str, object] = {}  # source root -> loaded extension module


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "0") not in ("", "0", "false", "False")


def cutlass_include_dirs() -> list[str]:
    """CUTLASS/CuTe header directories from the nvidia-cutlass wheel, if installed (else empty)."""
    try:
        import cutlass_library  # noqa: PLC0415
    except ImportError:
        return []
    root = Path(cutlass_library.__file__).resolve().parent / "source"
    dirs = [root / "include", root / "tools" / "util" / "include"]
    return [str(d) for d in dirs if d.is_dir()]


def include_dirs(source_root: Path = PACKAGE_DIR) -> list[str]:
    return [str(Path(source_root) / "include"), *cutlass_include_dirs()]


def cache_dir() -> Path:
    return Path(os.environ.get("MOK_CUDA_CACHE", Path.home() / ".cache" / "mok")).expanduser()


def nvcc_flags(*, verbose: bool | None = None, lineinfo: bool | None = None) -> list[str]:
    """The device-compile flags (also what the JIT passes to nvcc)."""
    verbose = _env_flag("MOK_CUDA_VERBOSE") if verbose is None else verbose
    lineinfo = _env_flag("MOK_CUDA_LINEINFO") if lineinfo is None else lineinfo
    flags = list(NVCC_FLAGS)
    if verbose:
        flags.append("-Xptxas=-v")
    if lineinfo:
        flags.append("-lineinfo")
    return flags


def source_fingerprint(flags: list[str], source_root: Path = PACKAGE_DIR) -> str:
    """Hash of every file under ``source_root``'s include/ and csrc/ (default mok/cuda), plus the flags."""
    root = Path(source_root)
    digest = hashlib.sha256()
    for path in sorted([*(root / "include").rglob("*"), *(root / "csrc").rglob("*")]):
        if path.is_file():
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    digest.update(" ".join(flags).encode())
    return digest.hexdigest()[:16]


def load_extension(verbose: bool | None = None, source_root: Path | str | None = None):
    """The compiled torch extension (built on first use, then cached on disk and in this process).

    Exposes ``forward(...)``, ``schedule_tables(...)``, ``counter_ints(num_ranks, capacity, minibatch_rows)``,
    ``error_words()`` and ``shared_memory_bytes()`` (see csrc/binding.cpp). ``source_root``: a directory holding
    another ``include/`` and ``csrc/`` to build instead of mok/cuda's (module docstring); its module name comes
    from its own sources' hash, so it loads next to the default one.
    """
    root = Path(source_root).resolve() if source_root is not None else PACKAGE_DIR
    loaded = _EXTENSIONS.get(str(root))
    if loaded is not None:
        return loaded
    from torch.utils.cpp_extension import load  # noqa: PLC0415

    verbose = _env_flag("MOK_CUDA_VERBOSE") if verbose is None else verbose
    flags = nvcc_flags(verbose=verbose)
    name = f"mok_sm90_{source_fingerprint(flags, root)}"
    build_dir = cache_dir() / name
    build_dir.mkdir(parents=True, exist_ok=True)
    csrc = root / "csrc"
    # NOTE: an explicit -gencode keeps torch from adding its own arch flags (a plain sm_90 pass would
    # reject wgmma and setmaxnreg), and -std in the nvcc flags keeps it from adding another.
    sources = [csrc / KERNEL_SOURCE.name, csrc / SCHEDULE_SOURCE.name, csrc / ROUTER_TOPK_SOURCE.name,
               csrc / BINDING_SOURCE.name]
    loaded = load(name=name, sources=[str(s) for s in sources], extra_cuda_cflags=flags, extra_cflags=["-O3"],
                  extra_include_paths=include_dirs(root), build_directory=str(build_dir), verbose=verbose)
    _EXTENSIONS[str(root)] = loaded
    return loaded


# --------------------------------------------------------------------------------------------------------
# Plain nvcc (CI, no GPU needed)
# --------------------------------------------------------------------------------------------------------

def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "nvcc").is_file():
            return str(Path(root) / "bin" / "nvcc")
    return None


def find_cuobjdump() -> str | None:
    """cuobjdump from the triton wheel (triton/backends/nvidia/bin), else from PATH."""
    try:
        import triton  # noqa: PLC0415
        candidate = Path(triton.__file__).resolve().parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if candidate.is_file():
            return str(candidate)
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def compile_object(output: str | Path, *, verbose: bool = False, lineinfo: bool = False,
                   timeout: float = 600, source: str | Path = KERNEL_SOURCE) -> subprocess.CompletedProcess:
    """``nvcc -c source -o output`` for sm_90a (default: csrc/sm90_moe_forward.cu). Raises RuntimeError if
    nvcc is missing; returns the completed process (check ``returncode``; ptxas reports are in ``stderr``)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (PATH, CUDA_HOME, /usr/local/cuda)")
    cmd = [nvcc, *nvcc_flags(verbose=verbose, lineinfo=lineinfo), *[f"-I{d}" for d in include_dirs()],
           "-c", str(source), "-o", str(output)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def resource_usage(output: str | Path | None = None) -> str:
    """ptxas's report (registers, spills, stack, barriers) for every kernel, as text."""
    import tempfile  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as tmp:
        proc = compile_object(output or Path(tmp) / "sm90_moe_forward.o", verbose=True)
    if proc.returncode != 0:
        raise RuntimeError(f"nvcc failed:\n{proc.stderr}")
    return "\n".join(line for line in proc.stderr.splitlines() if "ptxas" in line or "bytes" in line)


def disassemble(obj: str | Path) -> str:
    """SASS of an object file (cuobjdump -sass)."""
    tool = find_cuobjdump()
    if tool is None:
        raise RuntimeError("cuobjdump not found (triton wheel or PATH)")
    return subprocess.run([tool, "-sass", str(obj)], capture_output=True, text=True, check=True).stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compile", metavar="OUT", help="nvcc -c the kernel into OUT")
    parser.add_argument("--resources", action="store_true", help="print ptxas -v resource usage")
    parser.add_argument("--sass", action="store_true", help="print the SASS (needs --compile)")
    parser.add_argument("--jit", action="store_true", help="build (or load) the torch extension")
    args = parser.parse_args(argv)
    if args.resources:
        print(resource_usage())
    if args.compile:
        proc = compile_object(args.compile)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            return proc.returncode
        if args.sass:
            print(disassemble(args.compile))
    if args.jit:
        ext = load_extension()
        print(f"loaded {ext.__name__}: shared memory {ext.shared_memory_bytes()} bytes per CTA")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
