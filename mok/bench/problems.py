"""Benchmark problems: the inputs of one layer shape for a mok backend, and the calls the harness times.

A :class:`LayerProblem` owns ``n_sets`` input sets (``x``, routing, output gradient; the weights too when they
are small enough to sit in the L2 cache) so the harness can rotate through them, and exposes two calls of the
set index: ``fwd`` (the layer, autograd enabled, as in training) and ``fwd+bwd`` (the layer and the gradients
of x, the router (or router weights) and the three expert weights).

Router: with ``router=True`` every call starts from ``x`` and runs the router (:func:`mok.router_logits`, fp32
logits of x and router weights in x's dtype unless ``router_dtype`` says otherwise, then :func:`mok.route`), like
SonicMoE, whose layer always routes; with ``router=False`` the routing is drawn once per set and the call starts at
:func:`mok.moe`.
"""

from __future__ import annotations

from typing import Callable

import torch

import mok
from mok.bench.harness import mark_backward_start
from mok.config import MoEShape, MoKConfig

_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "mxfp8": torch.bfloat16}
# Rotate the weights too when all sets of them fit in this many bytes: below it a weight set could stay
# resident in the 50 MB L2 between calls; above it the rotation would only cost memory.
_ROTATE_WEIGHTS_BELOW = 1 << 30


def random_weights(shape: MoEShape, dtype: torch.dtype, device: torch.device, gen: torch.Generator):
    """``w_gate, w_up [E, I, H]`` and ``w_down [E, H, I]``, scaled so activations stay O(1) (never zeros)."""
    e, h, i = shape.num_experts, shape.hidden, shape.intermediate
    w_gate = torch.randn(e, i, h, device=device, generator=gen).mul_(h ** -0.5).to(dtype)
    w_up = torch.randn(e, i, h, device=device, generator=gen).mul_(h ** -0.5).to(dtype)
    w_down = torch.randn(e, h, i, device=device, generator=gen).mul_(i ** -0.5).to(dtype)
    return w_gate, w_up, w_down


class LayerProblem:
    """One shape's inputs for the mok backends, with ``n_sets`` rotating input sets.

    Args:
        shape: the layer problem.
        precision: ``"bf16"``, ``"fp32"`` or ``"mxfp8"`` (bf16 activations, MXFP8 weights).
        device: where the tensors live.
        n_sets: input sets for rotation.
        router: time the router inside each call (see the module docstring).
        router_dtype: the router weights' dtype (default: the activations'; ``torch.float32`` as
            :class:`mok.MoELayer` keeps them).
        ep_size: emulated expert-parallel ranks passed to :func:`mok.moe` (does not change the result).
        config: :class:`mok.MoKConfig` for the MoK backends (``None``: defaults).
        seed: seeds every random input.
    """

    def __init__(self, shape: MoEShape, precision: str, device: torch.device, *, n_sets: int = 3,
                 router: bool = True, ep_size: int = 1, config: MoKConfig | None = None, seed: int = 0,
                 router_dtype: torch.dtype | None = None) -> None:
        if precision not in _DTYPES:
            raise ValueError(f"precision must be one of {sorted(_DTYPES)}, got {precision!r}")
        self.shape, self.precision, self.device = shape, precision, torch.device(device)
        self.router, self.ep_size, self.config = router, ep_size, config or MoKConfig()
        dtype = _DTYPES[precision]
        gen = torch.Generator(device=self.device).manual_seed(seed)
        t, h, e, k = shape.tokens, shape.hidden, shape.num_experts, shape.top_k

        weight_bytes = 3 * e * shape.intermediate * h * torch.finfo(dtype).bits // 8
        weight_sets = n_sets if weight_bytes * n_sets <= _ROTATE_WEIGHTS_BELOW else 1
        # ``weights[j]``: (w_gate, w_up, w_down), the leaves the backward differentiates (bf16 for "mxfp8" too).
        self.weights = [tuple(w.requires_grad_(True) for w in random_weights(shape, dtype, self.device, gen))
                        for _ in range(weight_sets)]
        if precision == "mxfp8":
            # mok.moe quantizes bf16 weights through MXFP8Weights.quantize's cache, once per weight version;
            # filling the cache here keeps the quantization out of the timed calls (which never change the
            # weights), so they measure the layer with weights quantized once, as MoK reports MXFP8.
            from mok.mxfp8 import MXFP8Weights
            for w_gate, w_up, w_down in self.weights:
                MXFP8Weights.quantize(w_gate, w_up, w_down)

        self.xs = [torch.randn(t, h, device=self.device, generator=gen).to(dtype).requires_grad_(True)
                   for _ in range(n_sets)]
        self.grads = [torch.randn(t, h, device=self.device, generator=gen).to(dtype) for _ in range(n_sets)]
        if router:
            self.w_router = (torch.randn(e, h, device=self.device, generator=gen) * 0.02).to(router_dtype or dtype)
            self.w_router.requires_grad_(True)
            self.routes = None
        else:
            self.w_router = None
            self.routes = []
            for _ in range(n_sets):
                logits = torch.randn(t, e, device=self.device, generator=gen)
                weights, ids = mok.route(logits, k)
                self.routes.append((weights.detach().requires_grad_(True), ids))

    # ------------------------------------------------------------------------------------------------------
    def _route(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.router:
            logits = mok.router_logits(self.xs[i], self.w_router)  # fp32 (MOK_ROUTER picks the method)
            return mok.route(logits, self.shape.top_k, check_inputs=False)
        return self.routes[i]

    def _leaves(self, i: int) -> list[torch.Tensor]:
        routing_leaf = self.w_router if self.router else self.routes[i][0]
        return [self.xs[i], routing_leaf, *self.weights[i % len(self.weights)]]

    def forward(self, backend: str, i: int) -> torch.Tensor:
        """The layer on input set ``i`` with ``backend`` (autograd enabled)."""
        topk_weights, topk_ids = self._route(i)
        w_gate, w_up, w_down = self.weights[i % len(self.weights)]
        return mok.moe(self.xs[i], topk_ids, topk_weights, w_gate, w_up, w_down, backend=backend,
                       ep_size=self.ep_size, precision=self.precision, config=self.config, check_inputs=False)

    def forward_backward(self, backend: str, i: int):
        """The layer and the gradients of x, the router (weights) and the expert weights, on set ``i`` (the
        backward's start marked for the bench's direct backward time)."""
        out = self.forward(backend, i)
        mark_backward_start()
        return self.backward(out, i)

    def backward(self, out: torch.Tensor, i: int):
        """The gradients of x, the router (weights) and the expert weights from ``out``, :meth:`forward`'s output
        on set ``i``."""
        return torch.autograd.grad(out, self._leaves(i), self.grads[i], allow_unused=True)

    def calls(self, backend: str) -> dict[str, Callable[[int], object]]:
        """``{"fwd": f, "fwd+bwd": g}``: functions of the input-set index, as the harness times them."""
        return {"fwd": lambda i: self.forward(backend, i), "fwd+bwd": lambda i: self.forward_backward(backend, i)}
