"""``mok.MoELayer``: router, routed SwiGLU experts and optional shared experts, as an ``nn.Module``."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import MoKConfig
from .functional import moe
from .router import router_logits
from .routing import route


class SwiGLU(nn.Module):
    """A dense SwiGLU MLP (the shared experts: ``num_shared_experts`` of them fused into one wider MLP)."""

    def __init__(self, hidden_size: int, intermediate_size: int, **factory) -> None:
        super().__init__()
        self.gate = nn.Linear(hidden_size, intermediate_size, bias=False, **factory)
        self.up = nn.Linear(hidden_size, intermediate_size, bias=False, **factory)
        self.down = nn.Linear(intermediate_size, hidden_size, bias=False, **factory)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoELayer(nn.Module):
    """A DeepSeek-style MoE block: ``out = routed_experts(x) + shared_experts(x)``.

    Args:
        hidden_size, intermediate_size: H and the per-expert I (shared experts use the same I each).
        num_experts, top_k: routed experts and experts per token.
        num_shared_experts: dense SwiGLU experts every token goes through (0 for none).
        scoring: router scoring, ``"softmax"`` or ``"sigmoid"`` (see :func:`mok.route`).
        backend: which implementation computes the routed experts (see :mod:`mok.backends`); switch it at any
            time through the attribute of the same name.
        ep_group: a ``torch.distributed`` process group for real expert parallelism across GPUs; this
            module then holds ``num_experts / world_size`` experts (see :mod:`mok.distributed`). ``None``: all
            experts live here.
        ep_size: ranks to emulate in one process (``ep_group=None`` only); does not change the result.
        precision, config: passed to :func:`mok.moe`.

    The router runs in fp32 whatever the activation dtype, also under autocast (:func:`mok.router_logits`: for bf16
    activations on a Hopper GPU, a forward kernel that takes the fp32 router weights as three exact bf16 terms,
    without an fp32 copy of x; the same bits for a token whatever the tokens beside it, so whatever the EP degree).
    Input ``[..., H]``, output of the same shape.

    CUDA graphs: with ``backend="triton"`` or ``"cuda"`` (one process) the whole layer, forward and backward, can be
    captured, e.g. ``torch.cuda.make_graphed_callables(layer, (sample_x,))``; replays follow new inputs and new
    routing to the eager layer's bits (tests/test_layer_graph.py). Inside a capture the input checks, which read
    values back, are skipped.
    """

    def __init__(self, hidden_size: int, intermediate_size: int, num_experts: int, top_k: int, *,
                 num_shared_experts: int = 0, scoring: str = "softmax", backend: str = "reference",
                 ep_group=None, ep_size: int = 1, precision: str | None = None,
                 config: MoKConfig | None = None, device=None, dtype=None) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.hidden_size, self.intermediate_size = hidden_size, intermediate_size
        self.num_experts, self.top_k, self.scoring = num_experts, top_k, scoring
        self.backend, self.precision, self.config = backend, precision, config or MoKConfig()
        self.ep_group, self.ep_size = ep_group, ep_size
        local_experts = num_experts
        if ep_group is not None:
            world = torch.distributed.get_world_size(ep_group)
            if num_experts % world:
                raise ValueError(f"num_experts={num_experts} must be divisible by the ep_group size {world}")
            local_experts = num_experts // world
        self.router = nn.Linear(hidden_size, num_experts, bias=False, device=device, dtype=torch.float32)
        self.w_gate = nn.Parameter(torch.empty(local_experts, intermediate_size, hidden_size, **factory))
        self.w_up = nn.Parameter(torch.empty(local_experts, intermediate_size, hidden_size, **factory))
        self.w_down = nn.Parameter(torch.empty(local_experts, hidden_size, intermediate_size, **factory))
        self.shared = (SwiGLU(hidden_size, num_shared_experts * intermediate_size, **factory)
                       if num_shared_experts else None)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """nn.Linear's default initialisation, per expert."""
        for w in (self.w_gate, self.w_up, self.w_down):
            bound = 1.0 / math.sqrt(w.shape[-1])
            w.uniform_(-bound, bound)
        self.router.reset_parameters()

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(topk_weights, topk_ids)`` for ``[T, H]`` activations."""
        return route(router_logits(x, self.router.weight), self.top_k, scoring=self.scoring)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[-1] != self.hidden_size:
            raise ValueError(f"x must have last dimension hidden_size={self.hidden_size}, got shape {list(x.shape)}")
        flat = x.reshape(-1, self.hidden_size)
        topk_weights, topk_ids = self.route(flat)
        if self.ep_group is not None:
            from .distributed import distributed_moe
            out = distributed_moe(flat, topk_ids, topk_weights, self.w_gate, self.w_up, self.w_down,
                                  group=self.ep_group, num_experts=self.num_experts, backend=self.backend,
                                  precision=self.precision, config=self.config)
        else:
            out = moe(flat, topk_ids, topk_weights, self.w_gate, self.w_up, self.w_down, backend=self.backend,
                      ep_size=self.ep_size, precision=self.precision, config=self.config)
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.view(x.shape)

    def extra_repr(self) -> str:
        return (f"hidden={self.hidden_size}, intermediate={self.intermediate_size}, experts={self.num_experts}, "
                f"top_k={self.top_k}, shared={0 if self.shared is None else self.shared.gate.out_features // self.intermediate_size}, "
                f"backend={self.backend!r}")
