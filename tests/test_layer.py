"""MoELayer: shapes, shared experts, backend switch, training step."""

import pytest
import torch

import mok
from mok import MoKConfig


def test_forward_shapes_and_backend_switch():
    torch.manual_seed(0)
    layer = mok.MoELayer(32, 16, 8, 2, num_shared_experts=1, config=MoKConfig(expert_padding=16))
    x = torch.randn(2, 24, 32)
    ref = layer(x)
    assert ref.shape == x.shape
    layer.backend = "naive"
    assert torch.allclose(layer(x), ref, rtol=1e-5, atol=1e-6)


def test_matches_explicit_composition():
    torch.manual_seed(1)
    layer = mok.MoELayer(16, 8, 4, 2, num_shared_experts=2, scoring="sigmoid", config=MoKConfig(expert_padding=8))
    x = torch.randn(10, 16)
    w, ids = layer.route(x)
    routed = mok.moe(x, ids, w, layer.w_gate, layer.w_up, layer.w_down, backend="naive")
    assert torch.allclose(layer(x), routed + layer.shared(x), rtol=1e-5, atol=1e-6)
    assert layer.shared.gate.out_features == 2 * 8


def test_training_step_updates_every_parameter():
    torch.manual_seed(2)
    layer = mok.MoELayer(16, 8, 4, 2, num_shared_experts=1, config=MoKConfig(expert_padding=8))
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    before = {n: p.detach().clone() for n, p in layer.named_parameters()}
    loss = layer(torch.randn(32, 16)).pow(2).mean()
    loss.backward()
    opt.step()
    for name, p in layer.named_parameters():
        assert not torch.equal(before[name], p.detach()), f"{name} did not change"


def test_bf16_layer_and_emulated_ep_bitwise():
    torch.manual_seed(3)
    layer = mok.MoELayer(32, 16, 8, 2, config=MoKConfig(expert_padding=16), dtype=torch.bfloat16)
    x = torch.randn(16, 32, dtype=torch.bfloat16)
    a = layer(x)
    layer.ep_size = 4
    b = layer(x)
    assert a.dtype == torch.bfloat16
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_wrong_hidden_size():
    layer = mok.MoELayer(16, 8, 4, 2)
    with pytest.raises(ValueError, match="hidden_size=16"):
        layer(torch.randn(3, 12))
