"""Input checks with errors that name the argument and say what was expected.

Value checks (ids in range, no repeats, finite logits) read device data and so synchronise once per call;
pass ``check_inputs=False`` to :func:`mok.moe` in a tuned training loop once the inputs are known good. While a
CUDA graph is being captured they are skipped (a capture cannot read device data back), so a layer with its checks
on can still be captured, e.g. by ``torch.cuda.make_graphed_callables``; shapes, dtypes and devices are checked
either way.
"""

from __future__ import annotations

import torch

PRECISIONS = ("bf16", "fp32", "mxfp8")
_PRECISION_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "mxfp8": torch.bfloat16}


def can_read_back(t: torch.Tensor) -> bool:
    """Whether ``t``'s values can be read on the host now: not while a CUDA graph is being captured, where a
    read-back would synchronise the capturing stream (an error)."""
    return not (t.is_cuda and torch.cuda.is_current_stream_capturing())


def _shape(t: torch.Tensor) -> str:
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def require_tensor(name: str, value, ndim: int) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(value).__name__}")
    if value.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {_shape(value)}")
    return value


def check_route_inputs(logits: torch.Tensor, top_k: int, scoring: str) -> None:
    require_tensor("logits", logits, 2)
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {logits.dtype}")
    num_experts = logits.shape[1]
    if not isinstance(top_k, int) or not 1 <= top_k <= num_experts:
        raise ValueError(f"top_k must be an int in [1, num_experts={num_experts}], got {top_k!r}")
    if scoring not in ("softmax", "sigmoid"):
        raise ValueError(f"scoring must be 'softmax' or 'sigmoid', got {scoring!r}")
    if logits.numel() and can_read_back(logits) and not bool(torch.isfinite(logits).all()):
        bad = (~torch.isfinite(logits)).nonzero()[0].tolist()
        raise ValueError(f"logits must be finite; found {logits[bad[0], bad[1]].item()} at [{bad[0]}, {bad[1]}]")


def resolve_precision(precision: str | None, x: torch.Tensor) -> str:
    if precision is None:
        if x.dtype == torch.bfloat16:
            return "bf16"
        if x.dtype == torch.float32:
            return "fp32"
        raise TypeError(f"x must be bfloat16 or float32, got {x.dtype}")
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    if x.dtype != _PRECISION_DTYPES[precision]:
        raise TypeError(f"precision={precision!r} needs x of dtype {_PRECISION_DTYPES[precision]}, got {x.dtype}")
    return precision


def check_moe_inputs(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                     w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *, ep_size: int,
                     check_values: bool = True) -> None:
    """Shapes, dtypes, devices and (optionally) routing values of :func:`mok.moe`'s arguments."""
    require_tensor("x", x, 2)
    require_tensor("topk_ids", topk_ids, 2)
    require_tensor("topk_weights", topk_weights, 2)
    tokens, hidden = x.shape
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise TypeError(f"x must be bfloat16 or float32, got {x.dtype}")
    if topk_ids.shape[0] != tokens:
        raise ValueError(f"topk_ids must have shape [T={tokens}, top_k], got {_shape(topk_ids)}")
    top_k = topk_ids.shape[1]
    if topk_weights.shape != topk_ids.shape:
        raise ValueError(f"topk_weights must have the shape of topk_ids {_shape(topk_ids)}, got {_shape(topk_weights)}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
    if not topk_weights.is_floating_point():
        raise TypeError(f"topk_weights must be floating point (fp32 recommended), got {topk_weights.dtype}")

    require_tensor("w_gate", w_gate, 3)
    require_tensor("w_up", w_up, 3)
    require_tensor("w_down", w_down, 3)
    num_experts, intermediate, w_hidden = w_gate.shape
    if w_hidden != hidden:
        raise ValueError(f"w_gate must have shape [E, I, H={hidden}] (the nn.Linear convention), got {_shape(w_gate)}")
    if w_up.shape != w_gate.shape:
        raise ValueError(f"w_up must have the shape of w_gate {_shape(w_gate)}, got {_shape(w_up)}")
    if tuple(w_down.shape) != (num_experts, hidden, intermediate):
        raise ValueError(f"w_down must have shape [E={num_experts}, H={hidden}, I={intermediate}], got {_shape(w_down)}")
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        if w.dtype != x.dtype:
            raise TypeError(f"{name} must have x's dtype {x.dtype}, got {w.dtype}")

    tensors = {"x": x, "topk_ids": topk_ids, "topk_weights": topk_weights, "w_gate": w_gate, "w_up": w_up,
               "w_down": w_down}
    for name, t in tensors.items():
        if t.device != x.device:
            raise ValueError(f"{name} is on {t.device} but x is on {x.device}; all inputs must share one device")

    check_ep_split(tokens, num_experts, ep_size)
    if top_k > num_experts:
        raise ValueError(f"top_k={top_k} exceeds the number of experts E={num_experts}")

    if check_values:
        check_routing_values(topk_ids, num_experts)


def check_ep_split(tokens: int, num_experts: int, ep_size: int) -> None:
    """``ep_size`` ranks share the tokens and the experts evenly."""
    if not isinstance(ep_size, int) or ep_size < 1:
        raise ValueError(f"ep_size must be a positive int, got {ep_size!r}")
    if tokens % ep_size:
        raise ValueError(f"the token count T={tokens} must be divisible by ep_size={ep_size} "
                         f"(each rank owns T/ep_size tokens)")
    if num_experts % ep_size:
        raise ValueError(f"the expert count E={num_experts} must be divisible by ep_size={ep_size}")


def check_routing_values(topk_ids: torch.Tensor, num_experts: int) -> None:
    """``topk_ids`` ``[T, K]``: every id in ``[0, num_experts)`` and no expert twice in a row (reads the ids
    back to the host, so it synchronises; skipped while a CUDA graph is being captured)."""
    if not topk_ids.numel() or not can_read_back(topk_ids):
        return
    lo, hi = int(topk_ids.min()), int(topk_ids.max())
    if lo < 0 or hi >= num_experts:
        bad = lo if lo < 0 else hi
        raise ValueError(f"topk_ids must lie in [0, E={num_experts}), found {bad}")
    if topk_ids.shape[1] > 1:
        ordered = topk_ids.sort(dim=1).values
        repeated = (ordered[:, 1:] == ordered[:, :-1]).any(dim=1)
        if bool(repeated.any()):
            row = int(repeated.nonzero()[0])
            raise ValueError(f"topk_ids must not repeat an expert within a row; row {row} is "
                             f"{topk_ids[row].tolist()}")
