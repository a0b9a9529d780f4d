"""``mok.moe``: the functional MoE layer."""

from __future__ import annotations

import torch

from .backends import get_backend
from .checks import check_moe_inputs, resolve_precision
from .config import MoKConfig


def moe(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w_gate, w_up, w_down, *,
        backend: str = "reference", ep_size: int = 1, precision: str | None = None,
        config: MoKConfig | None = None, check_inputs: bool = True) -> torch.Tensor:
    """A routed-expert MoE layer with SwiGLU experts.

    ``out[t] = sum_k topk_weights[t,k] * w_down[e] @ (silu(w_gate[e] @ x[t]) * (w_up[e] @ x[t]))``,
    ``e = topk_ids[t,k]``, summed in fp32 in k order and returned in x's dtype.

    Args:
        x: ``[T, H]`` bfloat16 or float32 activations.
        topk_ids: ``[T, K]`` int32/int64 expert ids in ``[0, E)``, no repeats within a row (see :func:`mok.route`).
        topk_weights: ``[T, K]`` router weights (fp32).
        w_gate, w_up: ``[E, I, H]`` (the nn.Linear / Hugging Face convention: out_features first).
        w_down: ``[E, H, I]``. For ``precision="mxfp8"`` too (bf16): they are quantized once per weight version
            and cached (:meth:`mok.mxfp8.MXFP8Weights.quantize`), and the gradients flow to them.
        backend: ``"reference"``, ``"naive"``, ``"torch"``, ``"triton"`` or ``"cuda"`` (see :mod:`mok.backends`).
        ep_size: expert-parallel ranks to emulate in this process (rank r owns tokens ``[rT/R, (r+1)T/R)``
            and experts ``[rE/R, (r+1)E/R)``). The result is bitwise identical for every ``ep_size``.
        precision: ``None`` (x's dtype: ``"bf16"`` or ``"fp32"``), or ``"mxfp8"`` (bf16 x, FP8 E4M3 operands
            with one power-of-two scale per 32 elements along K).
        config: :class:`mok.MoKConfig` (tile, minibatch and ring sizes); ``None`` for defaults.
        check_inputs: validate routing values too (one device synchronisation).

    Differentiable with respect to ``x``, ``topk_weights`` and the three weights.
    """
    chosen = get_backend(backend)
    precision = resolve_precision(precision, x)
    if precision not in chosen.precisions:
        raise ValueError(f"backend {backend!r} does not support precision={precision!r}; "
                         f"it supports {list(chosen.precisions)}")
    check_moe_inputs(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size=ep_size,
                     check_values=check_inputs)
    if ep_size > 1 and not chosen.supports_ep:
        raise ValueError(f"backend {backend!r} does not emulate expert parallelism; use ep_size=1")
    return chosen.run(x, topk_ids, topk_weights, w_gate, w_up, w_down, ep_size=ep_size, precision=precision,
                      config=config or MoKConfig())
