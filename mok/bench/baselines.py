"""Baselines timed in the same run as mok: the PyTorch layer and SonicMoE.

* The **PyTorch** baseline is mok's own backend ``"torch"`` (argsort, ``torch._grouped_mm``, ``index_add``;
  :mod:`mok.backends.torch_grouped`), so it is timed through exactly the same code path as every mok backend.
* **SonicMoE** (sonic-moe 0.1.2.post1, the strongest public single-GPU MoE kernel for Hopper) is used when it
  imports. It brings its own router: ``MoE(...)(x)`` routes internally, so its timing always **includes its
  router** (a ``[T, H] x [H, E]`` GEMM, softmax and top-k). mok's harness times its own backends with the router
  too by default (``--router include``), so the ratios compare the same work. SonicMoE's first call of a new
  shape compiles and autotunes its GEMMs (quack: every candidate config compiled in worker processes, then
  timed), which the warm-up absorbs: the first side-by-side run (H200, 2026-11-29, round 7) took 403 s for the
  five anchors with ``QUACK_COMPILE_WORKERS`` = 16 (the bench stage's time, in
  ``experiments/results/h200_2026-11-29_round7/call6_gpu_run_summary.txt``; results in ``bench_20261129-125719.md``).

:class:`SonicLayer` follows SonicMoE's ``MoE(num_experts, num_experts_per_tok, hidden_size, intermediate_size,
activation_function, add_bias, std)`` constructor and its ``forward(hidden_states, kernel_backend_moe=...) ->
(out, aux_loss)`` (sonic-moe 0.1.2.post1; in training mode the forward also computes the switch auxiliary loss,
part of what is timed). Its forward has run on the H200 since round 7. Its ``fwd+bwd`` was first tried in round 26
(call 5) and gave no result at anchor-2 within 460 s; round 30 found why: its backward adds four GEMMs to the
forward's two, and quack compiles and times every candidate of each (9 or 22 configs, 70-115 s per GEMM with 16
workers) unless it finds a saved choice, so one new shape's forward and backward compile for about 9 minutes. With the
compiled GEMMs carried from an earlier call (``experiments/gpu_run.sh``, ``.carry/quack_cache.tgz``) anchor-5 ran
side by side in 283 s (``experiments/results/h200_2026-12-01_round30``). The bench still times SonicMoE forward only
unless ``--sonic-backward`` is given.

The GPU machine cannot reach a package registry: ``../shared/tools/sonic_bundle.sh`` packs SonicMoE into
``.carry/sonic`` and ``experiments/gpu_run.sh`` unpacks it onto ``PYTHONPATH``.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..config import MoEShape
from .harness import mark_backward_start

SONIC_NAME = "sonicmoe"
SONIC_NOTE = "SonicMoE's whole layer, its own router included"


def sonic_available() -> tuple[bool, str]:
    """``(True, version)`` if SonicMoE imports, else ``(False, why)``."""
    try:
        import sonicmoe  # noqa: F401
        from sonicmoe import KernelBackendMoE, MoE  # noqa: F401
        from sonicmoe.enums import ActivationType  # noqa: F401
    except Exception as err:  # ImportError, or a CUDA/DSL error raised at import
        return False, f"{type(err).__name__}: {err}"
    return True, str(getattr(sonicmoe, "__version__", "unknown version"))


class SonicLayer:
    """A SonicMoE layer of one shape, with its inputs and the two calls the harness times (its forward ran on
    the H200 in round 7; ``fwd+bwd`` gave no result in round 26: see the module docstring).

    Args:
        shape: T, H, I, E, K of the problem.
        device: a CUDA device (SonicMoE runs on Hopper/Blackwell only).
        n_sets: input sets to rotate through (only ``x`` and the output gradient rotate; the weights are far
            larger than the L2 cache at the benchmark shapes).
        seed: for the inputs (SonicMoE initialises its weights itself with std 0.02, as in its examples).
    """

    def __init__(self, shape: MoEShape, device: torch.device, n_sets: int = 3, seed: int = 0) -> None:
        from sonicmoe import KernelBackendMoE, MoE
        from sonicmoe.enums import ActivationType

        torch.manual_seed(seed)
        self.kernel_backend = KernelBackendMoE.sonicmoe
        # Built on the device: MoE.__init__ fills its fp32 weights with normal_ at once, gigabytes at the anchor
        # shapes (anchor-5: 11 GB), which on the host would take seconds and host memory; it also records the
        # current CUDA stream, which its kernels launch on.
        with torch.device(device):
            module = MoE(shape.num_experts, shape.top_k, shape.hidden, shape.intermediate, ActivationType.SWIGLU,
                         False, 0.02)
        self.module = module.to(dtype=torch.bfloat16)
        gen = torch.Generator(device=device).manual_seed(seed)
        self.xs = [torch.randn(shape.tokens, shape.hidden, device=device, dtype=torch.bfloat16, generator=gen)
                   .requires_grad_(True) for _ in range(n_sets)]
        self.grads = [torch.randn(shape.tokens, shape.hidden, device=device, dtype=torch.bfloat16, generator=gen)
                      for _ in range(n_sets)]
        self.params = [p for p in self.module.parameters() if p.requires_grad]

    def forward(self, i: int) -> torch.Tensor:
        out, _aux_loss = self.module(self.xs[i], kernel_backend_moe=self.kernel_backend)
        return out

    def forward_backward(self, i: int):
        out = self.forward(i)
        mark_backward_start()  # the bench's direct backward time starts here
        return torch.autograd.grad(out, [self.xs[i], *self.params], self.grads[i])

    def calls(self) -> dict[str, Callable[[int], object]]:
        """``{"fwd": f, "fwd+bwd": g}``: functions of the input-set index, as the harness times them."""
        return {"fwd": self.forward, "fwd+bwd": self.forward_backward}
