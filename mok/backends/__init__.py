"""Backends: the same layer computed different ways, chosen by name.

==============  ============================================================  ===========
name            what it is                                                     devices
==============  ============================================================  ===========
``reference``   MoK's algorithm step by step in PyTorch (the oracle kernels     cpu, cuda
                are checked against)
``naive``       per-expert loop through torch autograd                         cpu, cuda
``torch``       PyTorch baseline: argsort, grouped GEMM, index_add             cpu, cuda
``triton``      the Triton reference kernels (``mok/triton_ref``)              cuda (cpu under
                                                                               TRITON_INTERPRET=1)
``cuda``        the SM90 megakernel forward (``mok/cuda``), Triton backward    cuda (Hopper)
==============  ============================================================  ===========

Kernel backends register themselves when their module is imported; :func:`get_backend` imports them on first
use so that ``import mok`` stays cheap.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

import torch

from .naive import naive_moe
from .reference import reference_moe
from .torch_grouped import torch_moe


@dataclass(frozen=True)
class Backend:
    """A registered backend.

    ``run(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size, precision, config) -> out`` receives
    checked inputs and a resolved precision.
    """

    name: str
    run: Callable[..., torch.Tensor]
    precisions: tuple[str, ...]
    description: str
    supports_ep: bool = True


_BACKENDS: dict[str, Backend] = {}
_LAZY_MODULES = {"triton": "mok.triton_ref.pipeline", "cuda": "mok.cuda.backend"}


def backward_may_follow(*inputs: torch.Tensor) -> bool:
    """Whether autograd is recording a graph through these differentiable inputs: grad mode is on (not under
    ``torch.no_grad`` or ``inference_mode``, where a custom Function's ``ctx.needs_input_grad`` still reports
    ``requires_grad``) and some input wants a gradient. Backends use it to decide whether to keep what their
    backward needs."""
    return torch.is_grad_enabled() and any(t.requires_grad for t in inputs)


def register_backend(backend: Backend) -> Backend:
    _BACKENDS[backend.name] = backend
    return backend


def available_backends() -> list[str]:
    return sorted(set(_BACKENDS) | set(_LAZY_MODULES))


def get_backend(name: str) -> Backend:
    if name not in _BACKENDS and name in _LAZY_MODULES:
        try:
            importlib.import_module(_LAZY_MODULES[name])
        except ImportError as err:
            raise RuntimeError(f"backend {name!r} is unavailable: {err}") from err
    if name not in _BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {available_backends()}")
    return _BACKENDS[name]


register_backend(Backend("reference", reference_moe, ("bf16", "fp32"),
                         "MoK's algorithm step by step in PyTorch (schedule, ring, emulated ranks)"))
register_backend(Backend("naive", naive_moe, ("bf16", "fp32"), "per-expert loop through torch autograd"))
register_backend(Backend("torch", torch_moe, ("bf16", "fp32"), "argsort + grouped GEMM + index_add"))

__all__ = ["Backend", "available_backends", "get_backend", "register_backend"]
