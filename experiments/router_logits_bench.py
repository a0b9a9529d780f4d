"""EXPERIMENT: the router's logits, ``x @ W^T``, five ways, at the bench's shapes (bf16 x of ``[T, H]``, E experts).

* ``cublas bf16``: ``x @ W.T`` with bf16 W, bf16 logits (the bench's stand-in router before round 25);
* ``torch fp32``: ``F.linear(x.float(), W.float())`` with fp32 W (:class:`mok.MoELayer`'s router before round 25:
  an fp32 copy of x, then an fp32 GEMM);
* ``cublas bf16->fp32``: ``torch.mm(x, W.T, out_dtype=torch.float32)`` with bf16 W (fp32 logits from cuBLAS);
* ``kernel bf16`` / ``kernel fp32``: :func:`mok.triton_ref.router_logits.router_logits` with bf16 / fp32 W (fp32
  logits; fp32 weights by three bf16 terms).

GPU time of one call (16 calls per CUDA-graph replay, :func:`mok.bench.harness.time_graph_ms`, median), the rate at
which that reads x, and each way's largest error against an fp64 oracle on 256 rows, relative to the sum of the
products' magnitudes (fp32 rounding: about 1e-7 to 1e-6; bf16 logits: about 4e-3).

    python3 experiments/router_logits_bench.py [--shapes kimi-k2.7/ep64 anchor-2] [--json out.json] [--backward]
        [--splits 1 4 16]   # with --backward: grad_w's kernels alone at these token-chunk counts too
        [--input-tilings 128,64,128,8,3]   # with --backward: grad_x's kernel alone at these tilings too
        [--weight-tilings 16,128,64,4,3]   # with --backward: grad_w's kernels alone at these tilings too

Needs a CUDA GPU.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "experiments"))

DEFAULT_SHAPES = ["kimi-k2.7/ep64", "glm-5.2/ep64", "qwen3.5-397b/ep64", "deepseek-v4-pro/ep64", "anchor-1",
                  "anchor-2", "anchor-3", "anchor-5"]


def attempt(label: str, call):
    """``call()``, or None after printing why it failed (a tiling past the shared memory): the sweep goes on."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001
        print(f"    {label}: {type(error).__name__}: {str(error)[:80]}")
        return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", nargs="+", default=DEFAULT_SHAPES)
    parser.add_argument("--iters", type=int, default=50, help="graph replays per measurement")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--backward", action="store_true",
                        help="also time the backward: the PyTorch ops (F.linear(x.float(), w)'s) against the backward "
                             "kernels, for bf16 and fp32 weights")
    parser.add_argument("--tilings", nargs="*", default=[],
                        help="also time the kernel at these tilings, each BLOCK_T,BLOCK_E,BLOCK_H,warps,stages")
    parser.add_argument("--splits", nargs="*", type=int, default=[],
                        help="with --backward: also time grad_w alone cut into these numbers of token chunks")
    parser.add_argument("--input-tilings", nargs="*", default=[],
                        help="with --backward: also time grad_x alone at these tilings, each "
                             "BLOCK_T,BLOCK_E,BLOCK_H,warps,stages")
    parser.add_argument("--weight-tilings", nargs="*", default=[],
                        help="with --backward: also time grad_w alone at these tilings (each with its default chunk "
                             "count), each BLOCK_E,BLOCK_T,BLOCK_H,warps,stages")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415 (the CPU tests import this file without a GPU)
    import torch.nn.functional as F  # noqa: PLC0415

    from cuda_breakdown import SHAPES  # noqa: PLC0415
    from mok.bench.harness import time_graph_ms  # noqa: PLC0415
    from mok.router import torch_backward  # noqa: PLC0415
    from mok.triton_ref.router_logits import router_logits  # noqa: PLC0415
    from mok.triton_ref.router_logits_backward import (  # noqa: PLC0415
        router_logits_backward, token_chunks, weight_grad_splits, weight_grad_tiling)

    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA GPU")
    ways = {
        "cublas bf16": lambda x, w16, w32: x @ w16.T,
        "torch fp32": lambda x, w16, w32: F.linear(x.float(), w32),
        "cublas bf16->fp32": lambda x, w16, w32: torch.mm(x, w16.T, out_dtype=torch.float32),
        "kernel bf16": lambda x, w16, w32: router_logits(x, w16),
        "kernel fp32": lambda x, w16, w32: router_logits(x, w32),
    }
    print(f"{'shape':22s} {'T x H x E':>20s} " + " ".join(f"{w + ' us':>14s}" for w in ways)
          + "  x read TB/s (kernel fp32)  max rel err: " + " / ".join(ways))
    rows = []
    for name in args.shapes:
        shape = SHAPES[name]
        t, h, e = shape.tokens, shape.hidden, shape.num_experts
        gen = torch.Generator(device="cuda").manual_seed(t + h + e)
        x = torch.randn(t, h, device="cuda", generator=gen).to(torch.bfloat16)
        w32 = torch.randn(e, h, device="cuda", generator=gen) * 0.02
        w16 = w32.to(torch.bfloat16)
        want = x[:256].double() @ w32.double().T
        want16 = x[:256].double() @ w16.double().T
        scale = x[:256].double().abs() @ w32.double().abs().T
        us, err = {}, {}
        with torch.no_grad():
            for way, fn in ways.items():
                got = fn(x, w16, w32)[:256].double()
                err[way] = float(((got - (want16 if "bf16" in way else want)).abs() / scale).max())
                us[way] = time_graph_ms(lambda fn=fn: fn(x, w16, w32), args.iters) * 1e3
            for spec in args.tilings:
                tiling = tuple(int(v) for v in spec.split(","))
                for dtype, w in (("bf16", w16), ("fp32", w32)):
                    got = attempt(f"{name} {spec} {dtype}", lambda w=w, t=tiling: router_logits(x, w, t))
                    if got is None:
                        continue
                    if not torch.equal(got[:256].double(), router_logits(x[:256], w, tiling).double()):
                        raise SystemExit(f"{name} {spec} {dtype}: the bits changed with the token count")
                    us[f"kernel {dtype} {spec}"] = time_graph_ms(lambda w=w, t=tiling: router_logits(x, w, t),
                                                                 args.iters) * 1e3
            if args.backward:
                grad = torch.randn(t, e, device="cuda", generator=gen)
                for dtype, w in (("bf16", w16), ("fp32", w32)):
                    def torch_ops(w=w):
                        return torch_backward(x, w, grad)
                    want_x, want_w = torch_ops()
                    got_x, got_w = router_logits_backward(x, w, grad)
                    for part, got, want in (("x", got_x, want_x), ("w", got_w, want_w)):
                        err[f"bwd {dtype} grad_{part} vs torch"] = float(((got.double() - want.double()).abs().max()
                                                                          / want.double().abs().max()))
                    us[f"backward torch ops, {dtype} W"] = time_graph_ms(torch_ops, args.iters) * 1e3
                    us[f"backward kernels, {dtype} W"] = time_graph_ms(
                        lambda w=w: router_logits_backward(x, w, grad), args.iters) * 1e3
                    us[f"  grad_x kernel alone, {dtype} W"] = time_graph_ms(
                        lambda w=w: router_logits_backward(x, w, grad, need_weight=False), args.iters) * 1e3
                    for spec in args.input_tilings:
                        tiling = tuple(int(v) for v in spec.split(","))
                        got = attempt(f"{name} grad_x {spec} {dtype}", lambda w=w, t=tiling: router_logits_backward(
                            x, w, grad, need_weight=False, input_tiling=t)[0])
                        if got is None:
                            continue
                        same = "same bits" if torch.equal(got, got_x) else "other bits"
                        us[f"  grad_x {spec}, {dtype} W ({same})"] = time_graph_ms(
                            lambda w=w, t=tiling: router_logits_backward(x, w, grad, need_weight=False,
                                                                        input_tiling=t), args.iters) * 1e3
                # grad_w does not read the weights (only its final cast follows their dtype): timed once.
                us[f"  grad_w kernels alone ({weight_grad_splits(t, e, h)} chunks)"] = time_graph_ms(
                    lambda: router_logits_backward(x, w32, grad, need_x=False), args.iters) * 1e3
                default_w = router_logits_backward(x, w32, grad, need_x=False)[1]
                for spec in args.weight_tilings:
                    tiling = tuple(int(v) for v in spec.split(","))
                    got_w = attempt(f"{name} grad_w {spec}", lambda t=tiling: router_logits_backward(
                        x, w32, grad, need_x=False, weight_tiling=t)[1])
                    if got_w is None:
                        continue
                    # Other chunks sum in another order: fp32 rounding apart, never more.
                    off = float((got_w - default_w).abs().max() / default_w.abs().max())
                    if off > 1e-5:
                        raise SystemExit(f"{name} grad_w {spec}: {off:.1e} away from the default tiling's")
                    us[f"  grad_w {spec} ({weight_grad_splits(t, e, h, tiling)} chunks)"] = time_graph_ms(
                        lambda t=tiling: router_logits_backward(x, w32, grad, need_x=False, weight_tiling=t),
                        args.iters) * 1e3
                for splits in args.splits:
                    ran = token_chunks(t, splits, weight_grad_tiling(e)[1])[1]  # (a short T runs fewer)
                    us[f"  grad_w kernels alone, {ran} chunks"] = time_graph_ms(
                        lambda n=splits: router_logits_backward(x, w32, grad, need_x=False, splits=n),
                        args.iters) * 1e3
        rate = x.numel() * 2 / (us["kernel fp32"] * 1e-6) / 1e12
        print(f"{name:22s} {f'{t} x {h} x {e}':>20s} " + " ".join(f"{us[w]:14.1f}" for w in ways)
              + f"  {rate:10.2f}                  " + " / ".join(f"{err[w]:.1e}" for w in ways), flush=True)
        for way in us:
            if way not in ways:
                print(f"    {way:36s} {us[way]:8.1f} us")
        for what in err:
            if what not in ways:
                print(f"    {what:36s} {err[what]:8.1e} (largest difference over the largest value)")
        rows.append({"shape": name, "T": t, "H": h, "E": e, "us": us, "max_rel_err": err, "x_read_tb_s": rate})
        del x, w16, w32
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
