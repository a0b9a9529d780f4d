"""EXPERIMENT (round 8): the megakernel alone, interleaved in rounds (median), in these configurations: ring mode
(signal warp and store warps, the default); ring mode with consumer thread 0 signalling (MOK_CUDA_SIGNAL_WARP=0,
round 7's hand-off); ring mode with the consumers storing the down rows themselves (MOK_CUDA_STORE_WARPS=0, before
round 10); ring and gather mode with each token's weighted sum as soon as its rows are pushed (early_combine=True,
round 11; skipped on top-1 layers, which have no combine tasks) or every sum after the last GEMM
(early_combine=False); ring mode with round 7's red.release counter updates (probe bit "release_reds"); ring mode
without the epilogues' global stores (probe bit "stores") and without the epilogues at all (ablation "epilogue");
ring mode without the combine tasks' wait and sum (ablation "combine": the combine tail's cost) and without the
dispatch tasks' copies (ablation "dispatch"); gather mode; gather mode with the whole-row L2 bulk prefetch
(MOK_CUDA_GATHER_ROW_PREFETCH); ring and gather mode with both consumer warpgroups multiplying tiles whose second
half is padding (skip_padding_half=False, before round 12). Checks that the configurations which must not change a
bit do not. NOTE: every configuration with an ablation or probe bit runs without the store warps (round 10; the
kernel turns them off whenever ``ablate`` is set), so its difference to "ring" includes their gain; compare it with
"ring/consumer-stores" instead. ``--configs a,b`` picks configurations (the first without an ablation is the bitwise
reference; with two, the rotated order is balanced, so the pair is an unbiased A/B); ``--rounds N`` sets the rounds
of the interleaved timing (default 8).

Run on the H200 from the repository root:

    python3 -m mok.cuda.build --jit && python3 experiments/round8_probe.py [SHAPE ...]
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch  # noqa: E402

from cuda_breakdown import SHAPES, Problem  # noqa: E402
from mok.bench.harness import time_interleaved  # noqa: E402
from mok.cuda import backend  # noqa: E402
from mok.cuda.workspace import release_workspaces  # noqa: E402

CONFIGS = {
    "ring": dict(dispatch="ring"),
    "ring/consumer-signals": dict(dispatch="ring", signal_warp=False),
    "ring/consumer-stores": dict(dispatch="ring", store_warps=False),
    "ring/early-combine": dict(dispatch="ring", early_combine=True),
    "ring/tail-combine": dict(dispatch="ring", early_combine=False),
    "gather/early-combine": dict(dispatch="gather", early_combine=True),
    "gather/tail-combine": dict(dispatch="gather", early_combine=False),
    "ring+release_reds": dict(dispatch="ring", ablate=backend.PROBE["release_reds"]),
    "ring-stores": dict(dispatch="ring", ablate=backend.PROBE["stores"]),
    "ring-epilogue": dict(dispatch="ring", ablate=backend.ABLATE["epilogue"]),
    "ring-combine": dict(dispatch="ring", ablate=backend.ABLATE["combine"]),
    "ring-dispatch": dict(dispatch="ring", ablate=backend.ABLATE["dispatch"]),
    "gather": dict(dispatch="gather", gather_row_prefetch=False),
    "gather+rows": dict(dispatch="gather", gather_row_prefetch=True),
    "ring/no-skip": dict(dispatch="ring", skip_padding_half=False),
    "gather/no-skip": dict(dispatch="gather", skip_padding_half=False),
}

args = sys.argv[1:]
rounds = 8
if "--rounds" in args:
    at = args.index("--rounds")
    rounds = int(args[at + 1])
    del args[at:at + 2]
if "--configs" in args:
    at = args.index("--configs")
    chosen = args[at + 1].split(",")
    del args[at:at + 2]
    unknown = [k for k in chosen if k not in CONFIGS]
    if unknown:
        sys.exit(f"unknown configurations {unknown}; known: {list(CONFIGS)}")
    CONFIGS = {k: CONFIGS[k] for k in chosen}
for name in args or ["anchor-1", "anchor-2", "anchor-3", "anchor-4", "anchor-5", "kimi-k2.7/ep64"]:
    shape = SHAPES[name]
    p = Problem(shape, n_sets=2)
    # With the early-combine order built (top-k > 1); each launch says whether it uses it (default: off).
    preps = [p.prepare(j, early_combine=True) for j in range(2)]
    configs = {k: kw for k, kw in CONFIGS.items()
               if not (kw.get("early_combine") and preps[0].combine_tokens is None)}
    outs = {}
    for label, kw in configs.items():
        outs[label] = backend.launch(preps[0], **kw).clone()
    backend.check_error(preps[0])
    # The configurations that must not change a bit; the first of them is the reference (an ablation's is garbage).
    exact = [k for k, kw in configs.items() if not kw.get("ablate", 0) & ~backend.PROBE["release_reds"]]
    same = all(torch.equal(outs[k].view(torch.int16), outs[exact[0]].view(torch.int16)) for k in exact)
    launches = {label: (lambda j, kw=kw, preps=preps: backend.launch(preps[j], **kw))
                for label, kw in configs.items()}
    med = {k: t.median_ms for k, t in time_interleaved(launches, device=preps[0].out.device, rounds=rounds).items()}
    backend.check_error(preps[0])
    line = ", ".join(f"{k} {v:.3f} ms ({shape.forward_flops / v / 1e9:.0f} TFLOP/s)" for k, v in med.items())
    tiles, halves = preps[0].schedule.padding_half_tiles()
    print(f"{name}: {line}; {', '.join(exact)} bitwise equal: {same}; tiles {tiles}, with a padding half "
          f"{halves} ({100 * halves / max(tiles, 1):.1f}%)", flush=True)
    del preps, p, outs
    release_workspaces()
    torch.cuda.empty_cache()
