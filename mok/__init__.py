"""mok: fast, deterministic mixture-of-experts training kernels for Hopper.

Public API::

    mok.router_logits(x, router_weight)           -> fp32 logits [T, E]
    mok.route(logits, top_k)                      -> (topk_weights, topk_ids)
    mok.moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, backend=..., ep_size=..., precision=...)
    mok.MoELayer(hidden, intermediate, experts, top_k, num_shared_experts=..., backend=...)
    mok.config  (MoEShape presets, MoKConfig)      mok.heuristics  (SM-wave arithmetic, minibatch policies)
"""

from . import config, heuristics
from .backends import available_backends, get_backend, register_backend
from .config import MoEShape, MoKConfig
from .functional import moe
from .layer import MoELayer
from .router import router_logits
from .routing import route
from .schedule import ScheduleCapacityError, build_schedule

__version__ = "0.1.0"

__all__ = ["MoELayer", "MoEShape", "MoKConfig", "ScheduleCapacityError", "available_backends",
           "build_schedule", "config", "get_backend", "heuristics", "moe", "register_backend", "route",
           "router_logits"]
