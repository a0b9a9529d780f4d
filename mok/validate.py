"""Validation: run a backend against the fp64 oracle, the naive loop and the reference, plus determinism checks.

Used by ``python -m mok validate`` and by tests. The tolerance policy lives here, written once:
relative error ``||got - oracle|| / ||oracle||`` against the fp64 naive loop, per precision.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import torch

from .backends import get_backend
from .backends.naive import naive_moe
from .config import MoEShape, MoKConfig
from .routing import route

# Relative error against the fp64 oracle that a correct implementation stays under, per precision.
# bf16: operands and stored intermediates are rounded to 8 mantissa bits (about 4e-3 per rounding);
# mxfp8: E4M3 operands carry 3 mantissa bits (MoK's own MXFP8 tests allow relative L1 0.1).
TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "mxfp8": 1e-1}

OUTPUTS = ("out", "dx", "d_topk_weights", "d_w_gate", "d_w_up", "d_w_down")

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}  # activation dtype by precision name (the CLIs' --dtype)


def default_tile(shape: MoEShape) -> int:
    """Expert padding for a validation run: 16 rows for tiny shapes (at most 4,096 routed rows), else 128."""
    return 16 if shape.rows <= 4096 else 128


def random_problem(shape: MoEShape, dtype: torch.dtype, device: torch.device | str, seed: int = 0,
                   skew: float = 0.0, scoring: str = "softmax") -> list[torch.Tensor]:
    """Fresh random inputs for ``shape``: ``[x, topk_ids, topk_weights, w_gate, w_up, w_down]``, all in ``dtype``
    but the int32 ids and the fp32 router weights (:func:`mok.route`'s).

    Weights are scaled by fan-in so activations stay O(1); ``skew`` biases routing towards low expert ids.
    """
    gen = torch.Generator().manual_seed(seed)
    t, h, i, e, k = shape.tokens, shape.hidden, shape.intermediate, shape.num_experts, shape.top_k

    def randn(*size, scale=1.0):
        return (torch.randn(*size, generator=gen) * scale).to(device=device, dtype=dtype)

    x = randn(t, h)
    logits = torch.randn(t, e, generator=gen) - skew * torch.arange(e, dtype=torch.float32)
    topk_weights, topk_ids = route(logits.to(device), k, scoring=scoring)
    return [x, topk_ids, topk_weights, randn(e, i, h, scale=h ** -0.5), randn(e, i, h, scale=h ** -0.5),
            randn(e, h, i, scale=i ** -0.5)]


def forward_backward(backend: str, problem: list[torch.Tensor], *, ep_size: int = 1,
                     config: MoKConfig | None = None, precision: str | None = None, grad_seed: int = 1):
    """Output and the five gradients ``[out, dx, d_topk_weights, d_w_gate, d_w_up, d_w_down]``.

    ``backend="oracle"`` runs the naive loop in fp64.
    """
    from .functional import moe

    if backend == "oracle":
        problem = [p.double() if p.is_floating_point() else p for p in problem]
    x, ids, w, wg, wu, wd = (p.detach().clone() for p in problem)
    leaves = [x, w, wg, wu, wd]
    for leaf in leaves:
        leaf.requires_grad_(True)
    if backend == "oracle":
        out = naive_moe(x, ids, w, wg, wu, wd)
    else:
        out = moe(x, ids, w, wg, wu, wd, backend=backend, ep_size=ep_size, precision=precision, config=config)
    grad = torch.randn(out.shape, generator=torch.Generator().manual_seed(grad_seed))
    out.backward(grad.to(device=out.device, dtype=out.dtype))
    return [out.detach()] + [leaf.grad for leaf in leaves]


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.detach().double(), want.detach().double()
    if not bool(torch.isfinite(got).all()):
        return float("inf")
    return float((got - want).norm() / want.norm().clamp_min(1e-300))


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit patterns (so -0.0 differs from +0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)))


@dataclass
class Report:
    """Errors per output against each comparison, and named bitwise checks."""

    backend: str
    shape: MoEShape
    precision: str
    device: str
    errors: dict[str, list[float]] = field(default_factory=dict)   # comparison -> one error per output
    bitwise: dict[str, bool] = field(default_factory=dict)          # check -> passed
    tolerance: float = 0.0

    @property
    def passed(self) -> bool:
        oracle_ok = all(e <= self.tolerance for e in self.errors.get("vs fp64 oracle", []))
        return oracle_ok and all(self.bitwise.values())

    def table(self) -> str:
        lines = [f"backend={self.backend}  shape={self.shape.name} ({self.shape.describe()})  "
                 f"precision={self.precision}  device={self.device}  tolerance={self.tolerance:g}",
                 f"{'relative error':<26}" + "".join(f"{n:>15}" for n in OUTPUTS)]
        for name, errs in self.errors.items():
            lines.append(f"{name:<26}" + "".join(f"{e:>15.2e}" for e in errs))
        for name, ok in self.bitwise.items():
            lines.append(f"{'bitwise: ' + name:<50}{'identical' if ok else 'DIFFERENT'}")
        lines.append("PASS" if self.passed else "FAIL")
        return "\n".join(lines)


def validate(backend: str, shape: MoEShape, *, dtype: torch.dtype = torch.float32, device: str | None = None,
             ep_sizes: tuple[int, ...] = (1, 2), config: MoKConfig | None = None, precision: str | None = None,
             seed: int = 0, skew: float = 0.0, compare_reference: bool = True) -> Report:
    """Check ``backend`` on ``shape``: errors against the fp64 oracle, the naive loop (in the same dtype) and
    the reference backend; bitwise equality across a repeated run and across ``ep_sizes``."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if backend == "triton" and device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    get_backend(backend)  # fail early, with the backend's own message, if it cannot load
    problem = random_problem(shape, dtype, device, seed=seed, skew=skew)
    resolved = precision or ("bf16" if dtype == torch.bfloat16 else "fp32")
    report = Report(backend, shape, resolved, device, tolerance=TOLERANCE[resolved])

    first = forward_backward(backend, problem, ep_size=ep_sizes[0], config=config, precision=precision)
    oracle = forward_backward("oracle", problem)
    report.errors["vs fp64 oracle"] = [relative_error(g, o) for g, o in zip(first, oracle)]
    naive = forward_backward("naive", problem)
    report.errors["naive (same dtype)"] = [relative_error(n, o) for n, o in zip(naive, oracle)]
    if compare_reference and backend != "reference":
        ref = forward_backward("reference", problem, config=config)
        report.errors["vs reference"] = [relative_error(g, r) for g, r in zip(first, ref)]

    again = forward_backward(backend, problem, ep_size=ep_sizes[0], config=config, precision=precision)
    report.bitwise["repeat run"] = all(bitwise_equal(a, b) for a, b in zip(first, again))
    for ep in ep_sizes[1:]:
        other = forward_backward(backend, problem, ep_size=ep, config=config, precision=precision)
        report.bitwise[f"EP {ep} vs EP {ep_sizes[0]}"] = all(bitwise_equal(a, b) for a, b in zip(first, other))
    return report
