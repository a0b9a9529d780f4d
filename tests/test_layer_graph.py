"""``MoELayer`` in CUDA graphs: the input checks step aside during a capture, and a graphed layer
(``torch.cuda.make_graphed_callables``) replays new inputs, with new routing, to the eager layer's bits."""

from __future__ import annotations

import pytest
import torch

import mok
from mok.checks import can_read_back, check_routing_values
from mok.validate import bitwise_equal


def test_cpu_tensors_are_always_read_back():
    ids = torch.tensor([[0, 9]], dtype=torch.int32)
    assert can_read_back(ids)
    with pytest.raises(ValueError, match="must lie in"):  # so the value checks still run off the GPU
        check_routing_values(ids, 8)


def _layer_step(layer, x, grad_out):
    """The output and the gradients of x and of every parameter, from ``layer`` (eager or graphed)."""
    layer.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_(True)
    out = layer(x)
    out.backward(grad_out)
    return [out.detach().clone(), x.grad.clone()] + [p.grad.clone() for p in layer.parameters()]


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_gpu_graphed_layer_replays_new_inputs_to_the_eager_bits(backend):
    """Captured once, then fed two other batches (other routing, so other expert loads): output and every
    gradient the same bits as the eager layer's. The value checks are on (MoELayer's default): they are skipped
    inside the capture instead of breaking it."""
    if backend == "cuda" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the cuda backend's megakernel needs Hopper (sm_90a)")
    torch.manual_seed(0)
    tokens, hidden, intermediate = 512, 256, 128
    layer = mok.MoELayer(hidden, intermediate, num_experts=8, top_k=2, num_shared_experts=1, backend=backend,
                         device="cuda", dtype=torch.bfloat16)
    batches = [(torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16),
                torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16)) for _ in range(3)]
    eager = [_layer_step(layer, x, g) for x, g in batches]

    sample = batches[0][0].detach().clone().requires_grad_(True)
    graphed = torch.cuda.make_graphed_callables(layer, (sample,))
    loads = set()
    for (x, g), want in zip(reversed(batches), reversed(eager)):
        got = _layer_step(graphed, x, g)
        for name, a, b in zip(["out", "x.grad"] + [n for n, _ in layer.named_parameters()], got, want):
            assert bitwise_equal(a, b), f"{backend}: {name} differs from the eager layer's"
        loads.add(tuple(torch.bincount(layer.route(x)[1].flatten().long(), minlength=8).tolist()))
    assert len(loads) == 3  # (the batches really routed differently)
