"""Bad input gets a clear error that names the argument and what was expected."""

import pytest
import torch

import mok
from mok import MoKConfig

from conftest import make_problem


@pytest.fixture
def problem():
    return make_problem(16, 8, 4, 4, 2, seed=0)


def call(problem, **kw):
    x, ids, w, wg, wu, wd = problem
    args = dict(x=x, topk_ids=ids, topk_weights=w, w_gate=wg, w_up=wu, w_down=wd)
    args.update({k: v for k, v in kw.items() if k in args})
    options = {k: v for k, v in kw.items() if k not in args}
    return mok.moe(args["x"], args["topk_ids"], args["topk_weights"], args["w_gate"], args["w_up"],
                   args["w_down"], **options)


def test_wrong_rank(problem):
    with pytest.raises(ValueError, match=r"x must have 2 dimensions"):
        call(problem, x=problem[0][None])
    with pytest.raises(ValueError, match=r"w_down must have 3 dimensions"):
        call(problem, w_down=problem[5][0])


def test_wrong_shapes(problem):
    with pytest.raises(ValueError, match=r"w_gate must have shape \[E, I, H=8\]"):
        call(problem, w_gate=problem[3][:, :, :4], w_up=problem[4][:, :, :4])
    with pytest.raises(ValueError, match=r"w_up must have the shape of w_gate"):
        call(problem, w_up=problem[4][:, :2])
    with pytest.raises(ValueError, match=r"w_down must have shape \[E=4, H=8, I=4\]"):
        call(problem, w_down=problem[5].transpose(1, 2))
    with pytest.raises(ValueError, match=r"topk_weights must have the shape of topk_ids"):
        call(problem, topk_weights=problem[2][:, :1])
    with pytest.raises(ValueError, match=r"topk_ids must have shape \[T=16, top_k\]"):
        call(problem, topk_ids=problem[1][:8])


def test_mismatched_dtypes(problem):
    with pytest.raises(TypeError, match=r"w_gate must have x's dtype"):
        call(problem, w_gate=problem[3].bfloat16())
    with pytest.raises(TypeError, match=r"topk_ids must be int32 or int64"):
        call(problem, topk_ids=problem[1].float())
    with pytest.raises(TypeError, match=r"x must be bfloat16 or float32"):
        call(problem, x=problem[0].half())


def test_mismatched_devices(problem):
    meta = problem[3].to("meta")
    with pytest.raises(ValueError, match=r"w_gate is on meta but x is on cpu"):
        call(problem, w_gate=meta, w_up=problem[4].to("meta"), w_down=problem[5].to("meta"))


def test_ids_out_of_range_or_repeated(problem):
    ids = problem[1].clone()
    ids[3, 0] = 4
    with pytest.raises(ValueError, match=r"topk_ids must lie in \[0, E=4\), found 4"):
        call(problem, topk_ids=ids)
    ids = problem[1].clone()
    ids[5, 0] = -1
    with pytest.raises(ValueError, match=r"found -1"):
        call(problem, topk_ids=ids)
    ids = problem[1].clone()
    ids[7, 1] = ids[7, 0]
    with pytest.raises(ValueError, match=r"must not repeat an expert within a row; row 7"):
        call(problem, topk_ids=ids)


def test_tokens_not_divisible_by_ep(problem):
    with pytest.raises(ValueError, match=r"T=16 must be divisible by ep_size=3"):
        call(problem, ep_size=3)
    with pytest.raises(ValueError, match=r"E=4 must be divisible by ep_size=8"):
        call(make_problem(16, 8, 4, 4, 2), ep_size=8)


def test_unsupported_precision_and_backend(problem):
    with pytest.raises(ValueError, match=r"precision must be one of"):
        call(problem, precision="fp16")
    with pytest.raises(TypeError, match=r"precision='bf16' needs x of dtype torch.bfloat16"):
        call(problem, precision="bf16")
    with pytest.raises(ValueError, match=r"unknown backend 'nope'"):
        call(problem, backend="nope")
    with pytest.raises(ValueError, match=r"does not support precision='mxfp8'"):
        bf = [t.bfloat16() if t.is_floating_point() and i != 2 else t for i, t in enumerate(problem)]
        call(bf, precision="mxfp8", backend="reference")


def test_route_rejects_non_finite_logits():
    logits = torch.randn(4, 8)
    logits[2, 5] = float("nan")
    with pytest.raises(ValueError, match=r"logits must be finite; found nan at \[2, 5\]"):
        mok.route(logits, 2)
    logits[2, 5] = float("inf")
    with pytest.raises(ValueError, match=r"logits must be finite"):
        mok.route(logits, 2)


def test_route_argument_errors():
    with pytest.raises(ValueError, match=r"top_k must be an int in \[1, num_experts=8\]"):
        mok.route(torch.randn(4, 8), 9)
    with pytest.raises(ValueError, match=r"scoring must be 'softmax' or 'sigmoid'"):
        mok.route(torch.randn(4, 8), 2, scoring="relu")
    with pytest.raises(ValueError, match=r"logits must have 2 dimensions"):
        mok.route(torch.randn(8), 2)


def test_config_errors():
    with pytest.raises(ValueError, match=r"expert_padding must be a positive power of two"):
        MoKConfig(expert_padding=24)
    with pytest.raises(ValueError, match=r"minibatch_rows must be a positive multiple of expert_padding"):
        MoKConfig(expert_padding=16, minibatch_rows=40)
    with pytest.raises(ValueError, match=r"ring_rows \(48\) must be a multiple of minibatch_rows \(32\)"):
        MoKConfig(expert_padding=16, minibatch_rows=32, ring_rows=48)


def test_capacity_error_through_moe(problem):
    with pytest.raises(mok.ScheduleCapacityError, match="capacity"):
        call(problem, config=MoKConfig(expert_padding=4, capacity_rows=4))


def test_build_schedule_refuses_an_uneven_split_across_ranks():
    ids = torch.arange(10 * 2).remainder(6).view(10, 2).to(torch.int32)  # rows (0,1), (2,3), (4,5), ...
    with pytest.raises(ValueError, match=r"token count T=10 must be divisible by ep_size=3"):
        mok.build_schedule(ids, 6, 3)
    with pytest.raises(ValueError, match=r"expert count E=6 must be divisible by ep_size=4"):
        mok.build_schedule(ids[:8], 6, 4)
    with pytest.raises(ValueError, match=r"ep_size must be a positive int, got 0"):
        mok.build_schedule(ids, 6, 0)
    assert mok.build_schedule(ids[:9], 6, 3).ep_size == 3  # (an even split builds)


def test_shape_lookup_error():
    with pytest.raises(ValueError, match=r"unknown shape 'nope'"):
        mok.config.get_shape("nope")
