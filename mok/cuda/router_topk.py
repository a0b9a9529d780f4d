"""The router's top-k on Hopper: ``csrc/router_topk.cu``, one warp per token row.

The same ids and the same weight bits as the Triton kernel (:mod:`mok.triton_ref.router_topk`, the reference), faster
where rows are wide and ``top_k`` large: each lane sorts its own few logits once, so a round compares 32 heads instead
of a whole row (the kernel's comments say how the bits are matched). :func:`mok.route` takes it through
:func:`select_topk` when ``MOK_ROUTE_TOPK`` allows:

* ``auto`` (default): this kernel where it applies (:func:`applies`) to rows of at least :data:`AUTO_MIN_EXPERTS`
  experts *and* the extension is already loaded in the process (the ``cuda`` backend loads it), so routing never
  starts a build; the Triton kernel elsewhere. The bits are the same either way: which kernel ran is a matter of
  speed only. Measured on the H200 (round 33's call 6, GPU time per call, with softmax weights): 32,768 x 256,
  top-16 34.8 us against the Triton kernel's 116.8; 24,576 x 128, top-8 13.5 against 21.1; 2,048 x 384, top-8 5.1
  against 10.2; but 32,768 x 64, top-4 11.0 against 7.9 (a warp per row costs more than the Triton kernel's four rows
  per warp where rows are short), hence the threshold.
* ``cuda``: this kernel where it applies, building the extension if needed; the Triton kernel elsewhere.
* ``triton``: always the Triton kernel.

Applies to: fp32 logits ``[T, E]`` on a CUDA device, ``E <= 512``, ``top_k <= 32``, and any weighting but a softmax
without renormalisation (whose denominator runs over every expert: the Triton kernel keeps that one).
"""

from __future__ import annotations

import functools
import os

import torch

from .build import PACKAGE_DIR

# Mirrors of launch.cuh (known before the extension is loaded; a CPU test reads the header and compares).
MAX_EXPERTS = 512  # kRouterTopkMaxExperts
MAX_TOP_K = 32     # kRouterTopkMaxK

AUTO_MIN_EXPERTS = 128  # narrower rows: the Triton kernel is as fast or faster (module docstring)

# launch.cuh's RouterTopkWeighting, by (scoring, renormalize); None: ids only.
_WEIGHTING = {None: 0, ("softmax", True): 1, ("sigmoid", False): 2, ("sigmoid", True): 3}
_CHOICES = ("auto", "cuda", "triton")


def _choice() -> str:
    choice = os.environ.get("MOK_ROUTE_TOPK", "auto")
    if choice not in _CHOICES:
        raise ValueError(f"MOK_ROUTE_TOPK must be one of {_CHOICES}, got {choice!r}")
    return choice


@functools.lru_cache(maxsize=None)
def _is_sm90(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) == (9, 0)  # the extension is built for sm_90a only


def applies(logits: torch.Tensor, top_k: int, weighting: tuple[str, bool] | None) -> bool:
    """Whether the kernel can select (and weigh, ``weighting`` = ``(scoring, renormalize)``) for ``logits``."""
    return (logits.is_cuda and logits.dtype == torch.float32 and logits.dim() == 2
            and 1 <= logits.shape[1] <= MAX_EXPERTS and 1 <= top_k <= min(MAX_TOP_K, logits.shape[1])
            and weighting in _WEIGHTING and _is_sm90(logits.device.index))


def _extension(build: bool):
    """The loaded extension, or None if it is not loaded and ``build`` is False."""
    from . import build as cuda_build  # noqa: PLC0415

    loaded = cuda_build._EXTENSIONS.get(str(PACKAGE_DIR))
    return loaded if loaded is not None or not build else cuda_build.load_extension()


def select_topk(logits: torch.Tensor, top_k: int,
                weighting: tuple[str, bool] | None) -> tuple[torch.Tensor | None, torch.Tensor] | None:
    """``(weights or None, ids)`` from this kernel when ``MOK_ROUTE_TOPK`` and :func:`applies` allow it, else None
    (the caller runs the Triton kernel)."""
    choice = _choice()
    if choice == "triton":
        return None
    if choice == "auto" and (logits.shape[-1] < AUTO_MIN_EXPERTS or _extension(build=False) is None):
        return None
    if not applies(logits, top_k, weighting):
        return None
    return _launch(logits, top_k, weighting)


def _launch(logits: torch.Tensor, top_k: int,
            weighting: tuple[str, bool] | None) -> tuple[torch.Tensor | None, torch.Tensor]:
    ext = _extension(build=True)
    ids, weights = ext.router_topk(logits if logits.stride(1) == 1 else logits.contiguous(), int(top_k),
                                   _WEIGHTING[weighting])
    return (None if weighting is None else weights), ids


def router_topk(logits: torch.Tensor, top_k: int, *, scoring: str | None = "softmax",
                renormalize: bool = True) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``(weights [T, top_k] fp32, ids [T, top_k] int32)`` from this kernel outright (``scoring=None``: ids only,
    weights None), building the extension if needed; for tests and experiments. Raises ``ValueError`` where the
    kernel does not apply."""
    weighting = None if scoring is None else (scoring, bool(renormalize))
    if not applies(logits, top_k, weighting):
        raise ValueError(f"the CUDA top-k takes fp32 CUDA logits [T, E <= {MAX_EXPERTS}] on an SM90 GPU, top_k <= "
                         f"{MAX_TOP_K}, and a weighting in {sorted(k for k in _WEIGHTING if k)} or None; got "
                         f"{logits.dtype} {tuple(logits.shape)} on {logits.device}, top_k {top_k}, {weighting}")
    return _launch(logits, top_k, weighting)
