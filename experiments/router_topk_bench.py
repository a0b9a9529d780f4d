"""EXPERIMENT: the router's top-k selection (mok/triton_ref/router_topk.py) by tiling, beside torch.sort (what
mok.route used before round 16) and torch.topk (fast, but its order of equal values is unspecified).

For each shape, times the kernel at its default tilings (all of them, and the Triton candidates of rounds 16 and
32, with ``--candidates``) and mok's CUDA top-k (mok/cuda/csrc/router_topk.cu, round 33), checks that every one gives
the sort's ids, and prints a table: the median of CUDA-event timed calls after a warm-up, each call alone and in a
CUDA graph of 16. Run on the H200::

    python3 experiments/router_topk_bench.py [--shapes 32768x256x16 16384x384x8] [--candidates]
"""
from __future__ import annotations

import argparse

import triton
import triton.language as tl

TILINGS = [(16, 4), (4, 1), (8, 1), (8, 2), (16, 2), (32, 4), (2, 1)]
RETIRED: tl.constexpr = tl.constexpr(-9223372036854775807 - 1)  # the smallest int64: a key no round can pick


@triton.jit
def packed_keys(logits_ptr, rows, cols, row_ok, num_experts, stride_token, BLOCK_E: tl.constexpr):
    """The ``[rows, cols]`` logits as int64 keys that order like (logit, lower column first): the logit's bits made
    to order like the float (negative values' magnitude bits flipped; -0.0 made +0.0 first, as they compare equal)
    in the high word, BLOCK_E - 1 - column in the low word; padding columns and rows get the smallest int64."""
    real = row_ok[:, None] & (cols[None, :] < num_experts)
    values = tl.load(logits_ptr + rows[:, None].to(tl.int64) * stride_token + cols[None, :], mask=real,
                     other=0.0).to(tl.float32)
    values = tl.where(values == 0.0, 0.0, values)
    bits = values.to(tl.int32, bitcast=True)
    ordered = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    key = (ordered.to(tl.int64) << 32) | (BLOCK_E - 1 - cols[None, :]).to(tl.int64)
    return tl.where(real, key, RETIRED)


@triton.jit
def packed_key_topk_kernel(logits_ptr, ids_ptr, num_tokens, num_experts, stride_token,
                           TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    """A candidate: one int64 maximum per round (:func:`packed_keys`) instead of a float maximum and an int
    minimum."""
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < num_tokens
    key = packed_keys(logits_ptr, rows, cols, row_ok, num_experts, stride_token, BLOCK_E)
    for j in tl.static_range(TOP_K):
        best = tl.max(key, axis=1)
        choice = BLOCK_E - 1 - (best & 0xFFFFFFFF).to(tl.int32)
        tl.store(ids_ptr + rows.to(tl.int64) * TOP_K + j, choice, mask=row_ok)
        key = tl.where(key == best[:, None], RETIRED, key)


@triton.jit
def sorted_key_topk_kernel(logits_ptr, ids_ptr, num_tokens, num_experts, stride_token,
                           TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                           BLOCK_K: tl.constexpr, USE_TOPK: tl.constexpr):
    """Candidates (round 32): the packed keys above, sorted once (``tl.sort``, a bitonic network in registers) or
    cut to the first BLOCK_K by ``tl.topk`` (BLOCK_K = TOP_K rounded up to a power of two), instead of TOP_K rounds
    of a row maximum. Keys are distinct (the column is in them), so any sort gives the one order the tie rule
    asks for."""
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    cols = tl.arange(0, BLOCK_E)
    row_ok = rows < num_tokens
    key = packed_keys(logits_ptr, rows, cols, row_ok, num_experts, stride_token, BLOCK_E)
    if USE_TOPK:
        best = tl.topk(key, BLOCK_K, dim=1)
        slot = tl.arange(0, BLOCK_K)
    else:
        best = tl.sort(key, dim=1, descending=True)
        slot = cols
    choice = BLOCK_E - 1 - (best & 0xFFFFFFFF).to(tl.int32)
    tl.store(ids_ptr + rows[:, None].to(tl.int64) * TOP_K + slot[None, :], choice,
             mask=row_ok[:, None] & (slot[None, :] < TOP_K))


def sorted_key_topk(logits, top_k: int, block_t: int, num_warps: int, use_topk: bool):
    import torch  # noqa: PLC0415

    tokens, experts = logits.shape
    ids = torch.empty(tokens, top_k, dtype=torch.int32, device=logits.device)
    sorted_key_topk_kernel[(triton.cdiv(tokens, block_t),)](
        logits, ids, tokens, experts, logits.stride(0), TOP_K=top_k, BLOCK_T=block_t,
        BLOCK_E=triton.next_power_of_2(experts), BLOCK_K=triton.next_power_of_2(top_k), USE_TOPK=use_topk,
        num_warps=num_warps)
    return ids


def packed_key_topk(logits, top_k: int, block_t: int, num_warps: int):
    import torch  # noqa: PLC0415

    tokens, experts = logits.shape
    ids = torch.empty(tokens, top_k, dtype=torch.int32, device=logits.device)
    packed_key_topk_kernel[(triton.cdiv(tokens, block_t),)](
        logits, ids, tokens, experts, logits.stride(0), TOP_K=top_k, BLOCK_T=block_t,
        BLOCK_E=triton.next_power_of_2(experts), num_warps=num_warps)
    return ids


def parse_shape(text: str) -> tuple[int, int, int]:
    """``TOKENSxEXPERTSxTOPK`` as three ints."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"expected TOKENSxEXPERTSxTOPK, e.g. 32768x256x16; got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def read_table(text: str) -> list[dict]:
    """The rows of a table :func:`main` printed (its log), as dicts: shape, method, us, gpu_us (None in logs from
    before round 33, which have no GPU column) and ids_ok (None for the torch rows)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 5 or not cells[0][:1].isdigit():
            continue  # header, separator, anything else
        has_gpu = len(cells) >= 6
        same = cells[-1]
        rows.append({"shape": cells[0], "method": cells[1], "us": float(cells[2]),
                     "gpu_us": float(cells[3]) if has_gpu else None,
                     "ids_ok": None if not same else same == "yes"})
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=["32768x256x16", "16384x384x8", "65536x128x8", "4096x64x6"])
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--candidates", action="store_true",
                        help="also the Triton candidates of rounds 16 and 32 (packed keys, sorts, tl.topk)")
    args = parser.parse_args(argv)

    import torch  # noqa: PLC0415 (main only: the CPU tests import this file)

    from mok.bench.harness import time_fn, time_graph_ms  # noqa: PLC0415
    from mok.cuda.router_topk import applies as cuda_topk_applies  # noqa: PLC0415
    from mok.cuda.router_topk import router_topk as cuda_router_topk  # noqa: PLC0415
    from mok.triton_ref.router_topk import router_topk_ids, router_topk_weights  # noqa: PLC0415

    # "us": one call timed alone (its host launch included, as a lone kernel pays it); "GPU us": 16 calls captured in
    # a CUDA graph, per call (the kernel's own time, as inside a layer whose host runs ahead).
    print("| shape (T x E x k) | method | us | GPU us | GB/s of logits read (GPU) | ids as the stable sort's |")
    print("|---|---|---|---|---|---|")
    for text in args.shapes:
        tokens, experts, top_k = parse_shape(text)
        gen = torch.Generator(device="cuda").manual_seed(tokens + experts)
        logits = torch.randn(tokens, experts, device="cuda", generator=gen).to(torch.bfloat16).float()
        want = torch.sort(logits, dim=-1, descending=True, stable=True).indices[:, :top_k].to(torch.int32)
        methods = {"torch.sort (stable)": lambda i: torch.sort(logits, dim=-1, descending=True, stable=True),
                   "torch.topk": lambda i: torch.topk(logits, top_k, dim=-1)}
        methods["kernel + softmax weights (mok.route's fused method)"] = (
            lambda i: router_topk_weights(logits, top_k)[1])
        if cuda_topk_applies(logits, top_k, ("softmax", True)):  # (E <= 512, top-k <= 32, an SM90 GPU)
            methods["CUDA kernel (mok/cuda/csrc/router_topk.cu)"] = (
                lambda i: cuda_router_topk(logits, top_k, scoring=None)[1])
            methods["CUDA kernel + softmax weights"] = lambda i: cuda_router_topk(logits, top_k)[1]
        for block_t, warps in TILINGS if args.candidates else TILINGS[:2]:
            methods[f"kernel, {block_t} rows x {warps} warps"] = (
                lambda i, b=block_t, w=warps: router_topk_ids(logits, top_k, block_t=b, num_warps=w))
        for block_t, warps in [(16, 4), (4, 1), (8, 2)] if args.candidates else []:
            methods[f"packed-key candidate, {block_t} rows x {warps} warps"] = (
                lambda i, b=block_t, w=warps: packed_key_topk(logits, top_k, b, w))
        for block_t, warps in [(1, 1), (2, 1), (4, 1), (8, 2), (16, 4)] if args.candidates else []:
            methods[f"sorted-key candidate, {block_t} rows x {warps} warps"] = (
                lambda i, b=block_t, w=warps: sorted_key_topk(logits, top_k, b, w, False))
            if hasattr(tl, "topk"):
                methods[f"tl.topk candidate, {block_t} rows x {warps} warps"] = (
                    lambda i, b=block_t, w=warps: sorted_key_topk(logits, top_k, b, w, True))
        for label, fn in methods.items():
            us = time_fn(fn, device="cuda", warmup=3, iters=args.iters).median_ms * 1e3
            gpu_us = time_graph_ms(lambda: fn(0), iters=max(5, args.iters // 5)) * 1e3
            same = ""
            if not label.startswith("torch"):
                same = "yes" if torch.equal(fn(0), want) else "NO"
            print(f"| {text} | {label} | {us:.1f} | {gpu_us:.1f} | {logits.numel() * 4 / gpu_us / 1e3:.0f} | {same} |")


if __name__ == "__main__":
    main()
