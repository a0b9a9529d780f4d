"""Shared test helpers: the gpu marker, seeded random problems, bit-exact comparison, experiment scripts."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import torch

from mok.config import MoEShape
from mok.validate import OUTPUTS, bitwise_equal, forward_backward, random_problem, relative_error

HAS_CUDA = torch.cuda.is_available()
OUTPUT_NAMES = list(OUTPUTS)

# Without a GPU the Triton kernels run under the interpreter. Set here, before any test module imports
# mok.triton_ref: Triton reads the variable when a kernel is defined.
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
TRITON_DEVICE = "cpu" if INTERPRET else "cuda"  # where the Triton tests put their tensors


TESTS = Path(__file__).resolve().parent
EXPERIMENTS = TESTS.parent / "experiments"


def compile_in_fresh_process(script: str):
    """Run ``script`` (which compiles Triton kernels for a GPU target and prints JSON last) in a fresh Python without
    ``TRITON_INTERPRET``, so the kernels are compiled, not interpreted; returns that JSON. Skips where no ptxas can
    compile for the target."""
    import json
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # mok and this folder (sm90_compile.py, the compile helper the scripts import) on the script's path
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(TESTS), str(TESTS.parent), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0 and "ptxas" in proc.stderr:
        pytest.skip(f"no ptxas for the target here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


HOPPER_SHARED_PER_BLOCK = 227 * 1024


def assert_sm90_kernels_fit(found: dict, count: int) -> None:
    """A :func:`compile_in_fresh_process` report of ``count`` kernels ({label: sm90_compile.compile_sm90's answer}),
    each within Hopper's shared memory per block (a kernel over it compiles, then fails to launch), without spills."""
    assert len(found) == count, sorted(found)
    for key, kernel in found.items():
        assert kernel["shared"] <= HOPPER_SHARED_PER_BLOCK, (key, kernel)
        assert kernel["no_spills"], (key, kernel)


def load_experiment(relative_path: str):
    """A script under experiments/ (scripts, not a package) imported as a module named after its file, and
    registered in sys.modules under that name (dataclasses look their module up there)."""
    path = EXPERIMENTS / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def poisoned_triton_buffers():
    """Every buffer the Triton pipeline allocates is NaN-poisoned (``mok.triton_ref._common.set_poison``), so an
    element no kernel writes cannot hide; the previous setting comes back afterwards."""
    from mok.triton_ref import _common
    previous = _common.set_poison(True)
    yield
    _common.set_poison(previous)


def make_problem(tokens, hidden, intermediate, experts, top_k, *, dtype=torch.float32, device="cpu", seed=0,
                 scoring="softmax", skew: float = 0.0):
    """Fresh random inputs (never zeros): ``[x, topk_ids, topk_weights, w_gate, w_up, w_down]``.
    ``skew`` > 0 biases the router towards low expert ids (hot experts, empty experts)."""
    shape = MoEShape("test", tokens, hidden, intermediate, experts, top_k)
    return random_problem(shape, dtype, device, seed=seed, skew=skew, scoring=scoring)


def run_layer(backend, problem, *, ep_size=1, config=None, grad_seed=1, precision=None):
    """Forward and backward: ``[out, dx, d_topk_weights, d_w_gate, d_w_up, d_w_down]``.
    ``backend="oracle"`` is the naive loop in fp64."""
    return forward_backward(backend, problem, ep_size=ep_size, config=config, precision=precision,
                            grad_seed=grad_seed)


def peer_copy(peers, name: str, full: torch.Tensor):
    """A peer buffer of ``peers`` (emulated ranks) holding rank r's equal share of ``full`` (dim 0)."""
    parts = full.chunk(peers.world_size)
    buf = peers.buffer(name, tuple(parts[0].shape), full.dtype)
    for view, part in zip(buf.views, parts):
        view.copy_(part)
    return buf


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bit pattern, so -0.0 and +0.0 (and NaN payloads) compare as different."""
    t = t.detach().contiguous()
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bitwise_equal(a: torch.Tensor, b: torch.Tensor, what: str = "") -> None:
    assert a.shape == b.shape and a.dtype == b.dtype, f"{what}: {a.shape}/{a.dtype} vs {b.shape}/{b.dtype}"
    if not bitwise_equal(a, b):
        diff = int((bits(a) != bits(b)).sum())
        raise AssertionError(f"{what}: {diff} of {a.numel()} elements differ bitwise")


rel_err = relative_error


def assert_all_bitwise(got, want, what: str) -> None:
    """Every output of :func:`run_layer` (``OUTPUT_NAMES`` order) bitwise equal."""
    for name, a, b in zip(OUTPUT_NAMES, got, want):
        assert_bitwise_equal(a, b, f"{what}: {name}")


def assert_close_to(got, want, tol: float, what: str) -> None:
    """Every output free of NaN (a poisoned element nothing wrote) and within ``tol`` relative error."""
    for name, a, b in zip(OUTPUT_NAMES, got, want):
        assert not bool(torch.isnan(a).any()), f"{what}: {name} has NaN (an unwritten poisoned element?)"
        err = rel_err(a, b)
        assert err < tol, f"{what}: {name} relative error {err:.3e} >= {tol:g}"


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    """Cosine similarity of two tensors, flattened, in fp64."""
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))
