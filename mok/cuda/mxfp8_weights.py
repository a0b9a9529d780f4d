"""The expert weights the megakernel multiplies in ``precision="mxfp8"``: exact bf16 copies of the MXFP8 weights.

The megakernel keeps bf16 wgmma (Hopper has no block-scaled MMA; FP8 wgmma with per-32 promotion would not
compute the same sums), so the forward's weights are ``dequantize(quantize(w))``: bf16 values, exact (an E4M3
value times a power of two is a bf16 value, but in blocks with scale byte < 3). They are made once per weight
version, on top of the quantized-weight cache of :meth:`mok.mxfp8.MXFP8Weights.quantize`: an entry here lives as
long as the quantized weights it came from, so an optimizer step (which requantizes) also makes new bf16 copies.
Memory: one more bf16 copy of the three weights while they are cached.
"""

from __future__ import annotations

import weakref

import torch

from ..mxfp8 import MXFP8Weights

# id(quantized gate/up data) -> (weak reference to that tensor, weak reference to the down data, the bf16 copies)
_DEQUANTIZED: dict[int, tuple[weakref.ref, weakref.ref, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}


def forward_weights(w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor, *,
                    for_backward: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(w_gate, w_up, w_down)`` as the MXFP8 forward GEMMs see them: bf16 ``[E, I, H]``, ``[E, I, H]``,
    ``[E, H, I]``, contiguous. ``for_backward``: quantize the dgrad orientations too (a backward follows), so that
    the backward finds them in the same cache entry."""
    quantized = MXFP8Weights.quantize(w_gate, w_up, w_down, for_backward=for_backward)
    gate_up, down = quantized.gate_up_fwd.data, quantized.down_fwd.data
    key = id(gate_up)
    hit = _DEQUANTIZED.get(key)
    if hit is not None and hit[0]() is gate_up and hit[1]() is down:
        return hit[2]
    copies = tuple(t.contiguous() for t in quantized.dequantized(torch.bfloat16))

    def evict(_ref, key=key):
        entry = _DEQUANTIZED.get(key)
        if entry is not None and (entry[0]() is None or entry[1]() is None):
            del _DEQUANTIZED[key]

    _DEQUANTIZED[key] = (weakref.ref(gate_up, evict), weakref.ref(down, evict), copies)
    return copies


def clear() -> None:
    """Drop every bf16 copy (they are remade on the next MXFP8 forward)."""
    _DEQUANTIZED.clear()


def cached_copies() -> int:
    """How many weight sets are cached (tests)."""
    return len(_DEQUANTIZED)
