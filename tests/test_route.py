"""Routing: top-k selection, deterministic tie-breaking, renormalisation, gradients."""

import torch

import mok


def test_softmax_topk_and_renormalize():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0]])
    w, ids = mok.route(logits, 2)
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert ids.tolist() == [[1, 2]]
    p = torch.softmax(logits, -1)[0]
    assert torch.allclose(w, torch.stack([p[1], p[2]])[None] / (p[1] + p[2]))
    w2, _ = mok.route(logits, 2, renormalize=False)
    assert torch.allclose(w2, torch.stack([p[1], p[2]])[None])


def test_sigmoid_scoring():
    logits = torch.tensor([[0.5, -1.0, 2.0]])
    w, ids = mok.route(logits, 2, scoring="sigmoid", renormalize=False)
    assert ids.tolist() == [[2, 0]]
    assert torch.allclose(w, torch.sigmoid(torch.tensor([[2.0, 0.5]])))


def test_ties_go_to_lower_expert_id():
    logits = torch.zeros(3, 8)
    logits[1, 5] = logits[1, 6] = 1.0
    _, ids = mok.route(logits, 3)
    assert ids[0].tolist() == [0, 1, 2]
    assert ids[1].tolist() == [5, 6, 0]


def test_gradient_flows_to_logits():
    logits = torch.randn(5, 6, requires_grad=True)
    w, _ = mok.route(logits, 2)
    (w * torch.randn_like(w)).sum().backward()  # (w.sum() would be constant after renormalising)
    assert logits.grad is not None and bool(torch.isfinite(logits.grad).all())
    assert float(logits.grad.abs().sum()) > 0
