"""EXPERIMENT: the whole layer (``mok.moe``, ``backend="cuda"``, or ``--backend triton``) under two settings of the
backend's environment switches, timed in rotation and compared bit for bit.

:mod:`ab_kernels` times the megakernel alone. That can mislead when a change also costs host time outside the kernel:
round 19's TMA down store made the kernel 0.960x the time of the push at anchor-1, but the layer only 0.995x, because
the inverse map it then built in PyTorch cost 150-270 us of host time per call (mok/cuda/ROUNDS.md, "Round 19"). This
script times what a user calls. The two sides differ only in ``MOK_*`` environment variables that the backend reads at
every call (``mok.cuda.backend``'s ``resolve_*`` and ``default_*`` functions), set before each call of their side::

    python3 experiments/ab_layer.py --env-a MOK_CUDA_DOWN_TMA=0 --env-b MOK_CUDA_DOWN_TMA=auto anchor-2 anchor-1

Each shape prints one line: the median layer time of each side over ``rounds * calls`` calls that alternated in time
(:func:`mok.bench.harness.time_rotated`: the machine's drift favours neither side), their ratio, and whether the two
outputs of the same inputs are the same bits. ``--grad`` times a training forward (autograd on: the saved rows for
the backward are written too); the default is ``torch.no_grad()``. ``--router`` times the bench's layer instead, its
router and routing inside, a training forward (for ``MOK_ROUTER`` and ``MOK_ROUTE``); ``--router-weights fp32``
keeps the router weights in fp32 as :class:`mok.MoELayer` does, ``--backward`` adds the backward. ``--config-a`` /
``--config-b KEY=VALUE`` set :class:`mok.MoKConfig` fields per side instead (or as well), e.g. the minibatch policy::

    python3 experiments/ab_layer.py --backend triton --config-a policy=two_wave --config-b policy=four_wave anchor-3

Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "experiments"))


def parse_env(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` strings as a dict; NAME must be a ``MOK_`` variable (a switch of mok's backends)."""
    env = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.startswith("MOK_") or not name.replace("_", "").isalnum():
            raise ValueError(f"expected MOK_NAME=VALUE, got {pair!r}")
        env[name] = value
    return env


def parse_config(pairs: list[str]):
    """``KEY=VALUE`` strings as a :class:`mok.MoKConfig` (ab_kernels.py's parser and its split of MoKConfig fields
    from other options; here every key must be a field)."""
    from ab_kernels import parse_options, prepare_kwargs  # noqa: PLC0415
    from mok.config import MoKConfig  # noqa: PLC0415

    kwargs = prepare_kwargs(parse_options(pairs))
    unknown = set(kwargs) - {"config"}
    if unknown:
        raise ValueError(f"not MoKConfig fields: {sorted(unknown)}")
    return kwargs.get("config", MoKConfig())


@contextmanager
def environment(env: dict[str, str], names: set[str]):
    """Sets ``env``, unsets the other ``names`` (the switches the other side sets), and restores all of ``names``
    afterwards."""
    saved = {name: os.environ.get(name) for name in names}
    try:
        for name in names:
            if name in env:
                os.environ[name] = env[name]
            else:
                os.environ.pop(name, None)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env-a", action="append", default=[], metavar="MOK_NAME=VALUE",
                        help="an environment switch of side A (repeatable)")
    parser.add_argument("--env-b", action="append", default=[], metavar="MOK_NAME=VALUE",
                        help="an environment switch of side B (repeatable)")
    parser.add_argument("--config-a", action="append", default=[], metavar="KEY=VALUE",
                        help="a MoKConfig field of side A (repeatable), e.g. policy=two_wave")
    parser.add_argument("--config-b", action="append", default=[], metavar="KEY=VALUE",
                        help="a MoKConfig field of side B (repeatable)")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=4, help="calls per side and round")
    parser.add_argument("--grad", action="store_true", help="autograd on (a training forward)")
    parser.add_argument("--router", action="store_true",
                        help="the bench's layer with its router inside (mok.bench.problems.LayerProblem, a training "
                             "forward): for switches of the router and the routing (MOK_ROUTER, MOK_ROUTE)")
    parser.add_argument("--router-weights", choices=["bf16", "fp32"], default="bf16",
                        help="with --router: the router weights' dtype (fp32: as mok.MoELayer keeps them)")
    parser.add_argument("--backward", action="store_true",
                        help="with --router: time the forward and the backward (the gradients of x, the router "
                             "weights and the expert weights), a training step's layer")
    parser.add_argument("--backend", choices=["cuda", "triton"], default="cuda",
                        help="the layer's backend (triton: for switches of the Triton pipeline, e.g. MOK_PULL_ORDER)")
    parser.add_argument("shapes", nargs="*", default=["anchor-2", "anchor-1"])
    args = parser.parse_args(argv)
    if (args.backward or args.router_weights != "bf16") and not args.router:
        parser.error("--backward and --router-weights go with --router")
    sides = {"A": parse_env(args.env_a), "B": parse_env(args.env_b)}
    configs = {"A": parse_config(args.config_a), "B": parse_config(args.config_b)}
    if sides["A"] == sides["B"] and configs["A"] == configs["B"]:
        parser.error("give environment switches or config fields that differ between A and B")
    names = set(sides["A"]) | set(sides["B"])
    print(f"A = {sides['A'] or 'defaults'}, {configs['A']}; B = {sides['B'] or 'defaults'}, {configs['B']}", flush=True)

    import torch  # noqa: PLC0415 (the CPU tests import this file without a GPU)

    import mok  # noqa: PLC0415
    from cuda_breakdown import SHAPES, Problem  # noqa: PLC0415
    from mok.bench.harness import time_rotated  # noqa: PLC0415
    from mok.cuda.backend import check_pending_errors  # noqa: PLC0415
    from mok.cuda.workspace import release_workspaces  # noqa: PLC0415

    from mok.bench.problems import LayerProblem  # noqa: PLC0415

    for name in args.shapes:
        shape = SHAPES[name]
        if args.router:
            router_dtype = torch.float32 if args.router_weights == "fp32" else torch.bfloat16
            problem = LayerProblem(shape, "bf16", torch.device("cuda"), n_sets=2, router=True,
                                   router_dtype=router_dtype)
        else:
            problem = Problem(shape, n_sets=2)

        def side(label, problem=problem):
            def call(j):
                with environment(sides[label], names):
                    if args.router:
                        problem.config = configs[label]
                        if args.backward:
                            return problem.forward_backward(args.backend, j)[0]  # (x's gradient: compared below)
                        return problem.forward(args.backend, j)
                    with torch.set_grad_enabled(args.grad):
                        return mok.moe(*problem.args(j), backend=args.backend, config=configs[label],
                                       check_inputs=False)
            return call

        fns = {label: side(label) for label in sides}
        outs = {label: fn(0).detach().clone() for label, fn in fns.items()}
        same = torch.equal(outs["A"].view(torch.int16), outs["B"].view(torch.int16))
        timings = time_rotated(fns, device="cuda", n_sets=2, rounds=args.rounds, calls=args.calls)
        check_pending_errors()
        med = {label: t.median_ms for label, t in timings.items()}
        flops = shape.forward_flops * (3 if args.backward else 1)  # the backward counts twice the forward
        print(f"{name}: A {med['A']:.3f} ms ({flops / med['A'] / 1e9:.0f} TFLOP/s), "
              f"B {med['B']:.3f} ms ({flops / med['B'] / 1e9:.0f} TFLOP/s), "
              f"B/A time {med['B'] / med['A']:.3f}; outputs bitwise equal: {same}", flush=True)
        del problem, outs, fns
        release_workspaces()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
