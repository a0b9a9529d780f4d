"""The naive oracle: a per-expert loop through torch autograd, nothing shared with the MoK machinery.

Every other backend is checked against this. Call it with float64 tensors for an fp64 oracle.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def naive_moe(x, topk_ids, topk_weights, w_gate, w_up, w_down, *, ep_size: int = 1, precision: str = "bf16",
              config=None) -> torch.Tensor:
    """``out[t] = sum_k w[t,k] * W_down[e] (silu(W_gate[e] x[t]) * (W_up[e] x[t]))``, e = topk_ids[t,k].

    GEMMs run in x's dtype; the weighted sum accumulates in fp32 (fp64 for fp64 inputs). ``ep_size``,
    ``precision`` and ``config`` do not change the mathematics and are ignored.
    """
    del ep_size, precision, config
    acc_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    out = torch.zeros(x.shape, dtype=acc_dtype, device=x.device)
    for expert in range(w_gate.shape[0]):
        token, k = (topk_ids == expert).nonzero(as_tuple=True)
        if token.numel() == 0:
            continue
        xe = x[token]
        h = F.silu(xe @ w_gate[expert].T) * (xe @ w_up[expert].T)
        y = h @ w_down[expert].T
        out = out.index_add(0, token, topk_weights[token, k, None].to(acc_dtype) * y.to(acc_dtype))
    return out.to(x.dtype)
