"""``python -m mok``: info, validate, bench."""

from __future__ import annotations

import argparse
import os
import sys

import torch


def _info(args: argparse.Namespace) -> int:
    from . import __version__, heuristics
    from .backends import available_backends
    from .config import MODELS

    dev = heuristics.device_spec()
    where = torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device (using H200 figures)"
    print(f"mok {__version__}  torch {torch.__version__}  device: {where}  SMs: {dev.num_sms}")
    print(f"backends: {', '.join(available_backends())}")
    print(f"minibatch policies: {', '.join(heuristics.policies())}")
    print("\nTwo-SM-wave token threshold per minibatch (128x256 tiles; M* = 2 * SMs * 128 / ceil(min(2I, H) / 256)):")
    devices = [heuristics.GB300, heuristics.H200] + ([dev] if dev not in (heuristics.GB300, heuristics.H200) else [])
    print(f"{'model':<18}{'H':>7}{'I':>7}" + "".join(f"{d.name + f' ({d.num_sms})':>18}" for d in devices))
    for name, spec in MODELS.items():
        cells = "".join(f"{heuristics.two_wave_threshold(spec.hidden, spec.intermediate, d):>18.0f}" for d in devices)
        print(f"{name:<18}{spec.hidden:>7}{spec.intermediate:>7}{cells}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from .backends import available_backends, get_backend
    from .config import MoKConfig, get_shape
    from .validate import DTYPES, default_tile, validate

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # Triton kernels run under the interpreter on a CPU
    shape = get_shape(args.shape)
    if args.tokens:
        shape = shape.with_tokens(args.tokens)
    backends = args.backend or ["reference", "triton"] + (["cuda"] if _is_hopper(device) else [])
    config = MoKConfig(expert_padding=args.tile or default_tile(shape), minibatch_rows=args.minibatch,
                       ring_rows=args.ring)
    dtype = DTYPES[args.dtype]
    ep_sizes = tuple(int(e) for e in args.ep.split(","))
    failed = 0
    for name in backends:
        try:
            get_backend(name)
        except (RuntimeError, ValueError) as err:
            print(f"backend={name}: unavailable ({err}); available: {available_backends()}\n")
            if args.backend:  # asked for by name: that is a failure, not a skip
                return 2
            continue
        report = validate(name, shape, dtype=dtype, device=device, ep_sizes=ep_sizes, config=config,
                          precision=args.precision, seed=args.seed, skew=args.skew)
        print(report.table() + "\n")
        failed += not report.passed
    return 1 if failed else 0


def _is_hopper(device: str) -> bool:
    return device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


def _bench(argv: list[str]) -> int:
    try:
        from .bench.cli import main as bench_main
    except ImportError as err:
        print(f"the benchmark harness is unavailable: {err}", file=sys.stderr)
        return 2
    return bench_main(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m mok", description="mok: deterministic MoE kernels for Hopper")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="device, backends, and the two-wave thresholds of the preset models")
    val = sub.add_parser("validate", help="check backends against the fp64 oracle, naive loop and reference")
    val.add_argument("--backend", action="append", help="backend to check (repeatable); default: reference, "
                     "triton, and cuda on Hopper")
    val.add_argument("--shape", default="tiny", help="preset name (see mok.config.PRESETS) or T,H,I,E,K")
    val.add_argument("--tokens", type=int, help="override the shape's token count")
    val.add_argument("--dtype", choices=["fp32", "bf16"], default="bf16")
    val.add_argument("--precision", choices=["bf16", "fp32", "mxfp8"], help="default: the dtype's own")
    val.add_argument("--ep", default="1,2,4", help="comma-separated EP degrees to emulate and compare bitwise")
    val.add_argument("--device", help="cpu or cuda (default: cuda when available)")
    val.add_argument("--tile", type=int, help="expert padding / BLOCK_M (default 16 for tiny shapes, else 128)")
    val.add_argument("--minibatch", type=int, help="minibatch rows (default: the minibatch policy)")
    val.add_argument("--ring", type=int, help="ring rows (default: hold the whole schedule)")
    val.add_argument("--skew", type=float, default=0.0, help="router bias towards low expert ids")
    val.add_argument("--seed", type=int, default=0)
    sub.add_parser("bench", help="benchmark backends and baselines (python -m mok bench --help)", add_help=False)

    if argv[:1] == ["bench"]:
        return _bench(argv[1:])
    args = parser.parse_args(argv)
    return {"info": _info, "validate": _validate}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
