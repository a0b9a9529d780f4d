"""The measurements behind the notebooks, and how they are saved and read back.

Each study is a function that measures and returns a JSON-able document (metadata, parameters, records). The
notebooks call :func:`load_or_measure`, which in **full** mode reads ``experiments/results/<name>.json`` when it
exists (so the committed notebooks show the recorded GPU measurements instead of re-deriving them) and
otherwise measures on the GPU and saves the document there (and under ``$OUT/results`` when ``$OUT`` is set).
In **small** mode (``MOK_NOTEBOOK_MODE=small``: CI on a CPU, Triton under ``TRITON_INTERPRET=1``) the study
runs at tiny sizes so every code path is exercised in seconds; those numbers are CPU/interpreter timings, say
nothing about GPU performance, and are never saved.

=====================  ==========================================  ===========================================
study                  what it measures                            notebook
=====================  ==========================================  ===========================================
``push_pull``          push vs pull dispatch/combine: bytes,        ``push_vs_pull.ipynb``
                       bandwidth, signalling latency, uniform and
                       Zipf routing (emulated ranks, one GPU)
``overlap``            layer latency vs minibatch rows for the      ``overlap_granularity.ipynb``
                       four models' EP-64 slices
``sm_waves``           one expert GEMM's latency vs tokens          ``sm_wave_threshold.ipynb``
                       (cuBLAS and a fixed-tile Triton GEMM)
=====================  ==========================================  ===========================================
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Callable

import torch

import mok
from mok import heuristics
from mok.comm import EmulatedPeers
from mok.config import MODELS, MoEShape, MoKConfig
from mok.schedule import build_schedule

from . import harness
from .problems import LayerProblem

MODES = ("small", "full")

# MoK's published figures (background.md, section 1): claims to compare with, never plotted as our data.
MOK_PUBLISHED = {
    "pull_bandwidth_gain_under_imbalance": 0.29,   # "up to 29% more NVLink bandwidth" for pull
    "dispatch_signal_us_push": 103.0,
    "dispatch_signal_us_pull": 18.0,
    "two_wave_tokens_kimi_gb300": 2368,
}


# ----------------------------------------------------------------------------------------------------------
# Mode, saving and loading
# ----------------------------------------------------------------------------------------------------------
def notebook_mode() -> str:
    """``$MOK_NOTEBOOK_MODE`` (``small`` or ``full``); default ``full`` with a GPU, else ``small``."""
    mode = os.environ.get("MOK_NOTEBOOK_MODE") or ("full" if torch.cuda.is_available() else "small")
    if mode not in MODES:
        raise ValueError(f"MOK_NOTEBOOK_MODE must be one of {MODES}, got {mode!r}")
    return mode


def study_device(mode: str) -> torch.device:
    """The device a study runs on: the GPU in full mode (required), the CPU in small mode."""
    if mode == "full":
        if not torch.cuda.is_available():
            raise RuntimeError("full mode measures on a GPU and none is visible; set MOK_NOTEBOOK_MODE=small")
        return torch.device("cuda")
    return torch.device("cpu")


def results_dirs() -> list[Path]:
    """``experiments/results`` (or ``$MOK_RESULTS_DIR``), plus ``$OUT/results`` when ``$OUT`` is set."""
    return harness.output_dirs(os.environ.get("MOK_RESULTS_DIR"))


def load_results(name: str) -> dict[str, Any] | None:
    """The saved document ``<name>.json`` from the first results folder, or ``None``."""
    path = results_dirs()[0] / f"{name}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def save_results(name: str, doc: dict[str, Any]) -> list[Path]:
    """Write ``<name>.json`` into every results folder."""
    return [harness.write_json(doc, folder / f"{name}.json") for folder in results_dirs()]


def save_figure(fig, name: str, mode: str) -> list[Path]:
    """Save a matplotlib figure as ``<name>.png`` in every results folder (full mode only; small-mode
    figures show CPU numbers and are not kept)."""
    if mode != "full":
        return []
    paths = []
    for folder in results_dirs():
        folder.mkdir(parents=True, exist_ok=True)
        fig.savefig(folder / f"{name}.png", dpi=110, bbox_inches="tight")
        paths.append(folder / f"{name}.png")
    return paths


def load_or_measure(name: str, measure: Callable[[str], dict[str, Any]], mode: str | None = None) -> dict:
    """The study document: saved data in full mode when present (``MOK_NOTEBOOK_REFRESH=1`` re-measures),
    otherwise ``measure(mode)``, saved in full mode."""
    mode = mode or notebook_mode()
    if mode == "full" and os.environ.get("MOK_NOTEBOOK_REFRESH") != "1":
        saved = load_results(name)
        if saved is not None:
            saved.setdefault("source", f"loaded from {results_dirs()[0] / (name + '.json')}")
            return saved
    doc = measure(mode)
    doc["source"] = f"measured now ({mode} mode)"
    if mode == "full":
        save_results(name, doc)
    return doc


# ----------------------------------------------------------------------------------------------------------
# Routing
# ----------------------------------------------------------------------------------------------------------
def zipf_routing(tokens: int, experts: int, top_k: int, exponent: float, seed: int = 0,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``(topk_weights, topk_ids)`` with expert popularity ``p_e ~ (e + 1)^-exponent`` (0: uniform).

    Experts are drawn without replacement per token by the Gumbel-top-k trick; low expert ids are the hot
    ones, so with contiguous expert groups per rank the first ranks receive the most rows (expert imbalance).
    """
    gen = torch.Generator(device="cpu").manual_seed(seed)
    log_p = -exponent * torch.log(torch.arange(1, experts + 1, dtype=torch.float64))
    uniform = torch.rand(tokens, experts, generator=gen, dtype=torch.float64).clamp_(1e-12, 1 - 1e-12)
    logits = (log_p - torch.log(-torch.log(uniform))).float()
    return mok.route(logits.to(device), top_k)


# ----------------------------------------------------------------------------------------------------------
# Study 1: push vs pull
# ----------------------------------------------------------------------------------------------------------
PUSH_PULL_PARAMS = {
    "small": dict(ranks=2, tokens_per_rank=8, hidden=32, experts=4, top_k=2, tile=4, warmup=0, iters=1,
                  routings={"zipf-1.2": 1.2}),  # one routing keeps CI fast; tests cover uniform too
    # Kimi-like geometry: 2,048 tokens per rank (MoK's layer tests), top-8 of 384 experts, H 7168.
    "full": dict(ranks=8, tokens_per_rank=2048, hidden=7168, experts=384, top_k=8, tile=128, warmup=5, iters=30,
                 routings={"uniform": 0.0, "zipf-1.2": 1.2}),
}


def _bitwise_same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x.view(torch.int16), y.view(torch.int16)) for x, y in zip(a, b))


def push_pull_study(mode: str, **overrides) -> dict[str, Any]:
    """Time the four push/pull row transfers (dispatch and combine, each pull and push) with and without
    completion signalling, and signalling alone, under each routing; check both directions move the same
    bytes to the same places. Ranks are emulated on one device: the "link" is HBM/L2."""
    from mok.triton_ref.push_pull import PushPullPlan, SignalState

    params = {**PUSH_PULL_PARAMS[mode], **overrides}
    device = study_device(mode)
    ranks, t_local, hidden = params["ranks"], params["tokens_per_rank"], params["hidden"]
    experts, top_k, tile = params["experts"], params["top_k"], params["tile"]
    dtype = torch.bfloat16
    elem = torch.finfo(dtype).bits // 8
    records: list[dict[str, Any]] = []
    routings: dict[str, Any] = {}
    for r_idx, (routing, exponent) in enumerate(params["routings"].items()):
        _, ids = zipf_routing(ranks * t_local, experts, top_k, exponent, seed=r_idx, device=device)
        loose = build_schedule(ids, experts, ranks, tile)
        rows_used = loose.rows_used()
        capacity = heuristics.round_to_tiles(max(rows_used), tile)
        schedule = build_schedule(ids, experts, ranks, tile, capacity=capacity)
        plan = PushPullPlan(schedule)
        real = [int(v) for v in schedule.segment_counts.sum(1).tolist()]
        routings[routing] = {"zipf_exponent": exponent, "rows_per_expert_rank": real,
                             "imbalance_max_over_mean": max(real) / (sum(real) / ranks), "capacity": capacity}

        peers = EmulatedPeers(ranks, device)
        gen = torch.Generator(device="cpu").manual_seed(100 + r_idx)
        x = peers.buffer("x", (t_local, hidden), dtype)
        y = peers.buffer("y", (capacity, hidden), dtype)
        for r in range(ranks):
            x[r].copy_(torch.randn(t_local, hidden, generator=gen))
            y[r].copy_(torch.randn(capacity, hidden, generator=gen))
        recv = peers.buffer("recv", (capacity, hidden), dtype)
        slots = peers.buffer("slots", (t_local * top_k, hidden), dtype)
        payload = plan.real_rows * hidden * elem

        # Same bytes, same places: poison, run each direction, compare bit patterns.
        for transfer in ("dispatch", "combine"):
            outs = {}
            for direction in ("pull", "push"):
                target = recv if transfer == "dispatch" else slots
                for r in range(ranks):
                    target[r].fill_(float("nan"))
                if transfer == "dispatch":
                    plan.dispatch(x, recv, direction)
                else:
                    plan.combine(y, slots, direction)
                outs[direction] = [v.clone() for v in target.views]
            routings[routing][f"{transfer}_push_equals_pull"] = _bitwise_same(outs["pull"], outs["push"])
            del outs

        for transfer in ("dispatch", "combine"):
            for direction in ("pull", "push"):
                for variant in ("data", "data+signal", "signal"):
                    signal = SignalState.create(ranks, device) if variant != "data" else None
                    move = variant != "signal"
                    if transfer == "dispatch":
                        def call(_i, d=direction, s=signal, m=move):
                            plan.dispatch(x, recv, d, signal=s, move_data=m)
                    else:
                        def call(_i, d=direction, s=signal, m=move):
                            plan.combine(y, slots, d, signal=s, move_data=m)
                    timing = harness.time_fn(call, device=device, warmup=params["warmup"], iters=params["iters"])
                    if signal is not None:
                        signal.check()
                    moved = payload if move else 0
                    records.append({
                        "routing": routing, "transfer": transfer, "direction": direction, "variant": variant,
                        "ms": timing.median_ms, "ms_p10": timing.p10_ms, "ms_p90": timing.p90_ms,
                        "payload_bytes": moved,
                        "link_gbps": harness.gbps(moved, timing.median_ms) if moved else None,
                        "hbm_gbps": harness.gbps(2 * moved, timing.median_ms) if moved else None})

        # Context: torch's row gather of the same rows (one source tensor, no peers, no table walk).
        source = torch.cat(list(x.views))
        token_of_row = (torch.arange(ranks, device=device).view(-1, 1) * t_local
                        + torch.arange(t_local * top_k, device=device).view(1, -1) // top_k).reshape(-1)
        timing = harness.time_fn(lambda _i: source.index_select(0, token_of_row), device=device,
                                 warmup=params["warmup"], iters=params["iters"])
        records.append({"routing": routing, "transfer": "dispatch", "direction": "torch index_select",
                        "variant": "data", "ms": timing.median_ms, "ms_p10": timing.p10_ms, "ms_p90": timing.p90_ms,
                        "payload_bytes": payload, "link_gbps": harness.gbps(payload, timing.median_ms),
                        "hbm_gbps": harness.gbps(2 * payload, timing.median_ms)})
        del peers, x, y, recv, slots, source, plan, schedule, loose
        harness.free_memory(device)

    meta = harness.collect_metadata(device)
    meta.update(emulated=True, gpus=1 if device.type == "cuda" else 0, world_size=ranks,
                link="HBM/L2 of one device (ranks emulated)" if device.type == "cuda" else
                "CPU memory under the Triton interpreter (small mode: no performance meaning)")
    return {"schema": "mok.push_pull/1", "mode": mode, "metadata": meta, "params": params,
            "routings": routings, "results": records, "published": MOK_PUBLISHED}


# ----------------------------------------------------------------------------------------------------------
# Study 2: overlap granularity (layer latency vs minibatch rows)
# ----------------------------------------------------------------------------------------------------------
def pick_layer_backend(device: torch.device, prefer: tuple[str, ...] = ("cuda", "triton", "reference")) -> tuple[str, dict]:
    """The first backend of ``prefer`` that runs here, and why the ones before it did not."""
    from .cli import probe_backend

    skipped = {}
    for name in prefer:
        reason = probe_backend(name, device, "bf16" if device.type == "cuda" else "fp32")
        if reason is None:
            return name, skipped
        skipped[name] = reason
    raise RuntimeError(f"none of {prefer} runs on {device}: {skipped}")


def overlap_shapes(mode: str) -> list[MoEShape]:
    """The four models' EP-64 per-GPU slices (full), or one tiny stand-in (small)."""
    if mode == "full":
        return [spec.ep_slice(64) for spec in MODELS.values()]
    return [MoEShape("tiny-slice", 96, 64, 32, 4, 1)]


def minibatch_candidates(tile: int, choices: tuple[int, ...], whole: int) -> list[int]:
    """Minibatch sizes to sweep: whole tiles from one tile to ``whole`` (the whole layer's rows, padding
    included), plus the policies' ``choices`` (each at most ``whole``)."""
    sizes = {tile * n for n in (1, 2, 4, 6, 8, 12, 16, 17, 20, 24, 32, 48, 64, 96, 128) if tile * n < whole}
    sizes |= {min(choice, whole) for choice in choices} | {whole}
    return sorted(sizes)


def overlap_study(mode: str, backend: str | None = None, passes: tuple[str, ...] = ("fwd",), **overrides) -> dict:
    """Layer latency against ``MoKConfig.minibatch_rows`` per model slice; marks MoK's two-wave rule's choice."""
    device = study_device(mode)
    tile = overrides.get("tile", 128 if mode == "full" else 16)
    warmup, iters = overrides.get("warmup", 3 if mode == "full" else 0), overrides.get("iters", 15 if mode == "full" else 1)
    skipped: dict[str, str] = {}
    if backend is None:
        # The CUDA megakernel is where the minibatch size matters most (it overlaps transfers with GEMMs);
        # the Triton pipeline walks the same ring. Small mode uses the reference: the interpreter is slow.
        if mode == "full":
            backend, skipped = pick_layer_backend(device, ("cuda", "triton", "reference"))
        else:
            backend = "reference"
    precision = "bf16" if device.type == "cuda" else "fp32"
    spec = heuristics.device_spec(device)
    records = []
    choices = {}
    for shape in overlap_shapes(mode):
        # The sweep measures and marks MoK's two-wave rule and mok's default policy; evaluate_policy places any
        # other policy on the saved sweep.
        base = MoKConfig(expert_padding=tile, policy="two_wave")
        choice = heuristics.minibatch_rows(shape, spec, base)
        default = heuristics.minibatch_rows(shape, spec, MoKConfig(expert_padding=tile))  # mok's default policy
        choices[shape.name] = {"two_wave_rows": choice, "default_policy": MoKConfig().policy, "default_rows": default,
                               "threshold_rows": heuristics.two_wave_threshold(shape.hidden, shape.intermediate, spec)}
        # A minibatch larger than the layer is the whole layer: that is where the choice lands.
        whole = heuristics.whole_layer_policy(shape, spec, base)
        candidates = minibatch_candidates(tile, (choice, default), whole)
        landed = min(choice, whole)
        choices[shape.name]["rows_used"] = landed
        problem = LayerProblem(shape, precision, device, n_sets=2, router=False, config=base)
        for rows in candidates:
            problem.config = base.replace(minibatch_rows=rows)
            for pass_ in passes:
                call = problem.calls(backend)["fwd" if pass_ == "fwd" else "fwd+bwd"]
                try:
                    timing = harness.time_fn(call, device=device, n_sets=2, warmup=warmup, iters=iters,
                                             max_seconds=10.0 if mode == "full" else None)
                    ms, err = timing.median_ms, None
                except Exception as exc:  # a size the backend rejects: recorded, the sweep goes on
                    ms, err = None, f"{type(exc).__name__}: {str(exc)[:160]}"
                flops = shape.forward_flops if pass_ == "fwd" else 3 * shape.forward_flops
                records.append({"shape": shape.name, "pass": pass_, "minibatch_rows": rows, "ms": ms,
                                "tflops": harness.tflops(flops, ms) if ms else None, "error": err,
                                "is_two_wave_choice": rows == landed, "is_default_choice": rows == min(default, whole)})
        del problem
        harness.free_memory(device)
    meta = harness.collect_metadata(device)
    return {"schema": "mok.overlap/1", "mode": mode, "metadata": meta, "backend": backend,
            "skipped_backends": skipped, "tile": tile, "device_spec": {"name": spec.name, "num_sms": spec.num_sms},
            "shapes": [harness.shape_fields(s) for s in overlap_shapes(mode)], "choices": choices,
            "results": records}


def best_and_choice(doc: dict[str, Any], shape: str, pass_: str = "fwd") -> dict[str, Any]:
    """For one shape: the sweep's fastest minibatch size, the policy's choice and the ratio of their latencies."""
    recs = [r for r in doc["results"] if r["shape"] == shape and r["pass"] == pass_ and r["ms"]]
    if not recs:
        return {"shape": shape, "best_rows": None, "choice_rows": None, "choice_over_best": None}
    best = min(recs, key=lambda r: r["ms"])
    chosen = next((r for r in recs if r["is_two_wave_choice"]), None)
    return {"shape": shape, "best_rows": best["minibatch_rows"], "best_ms": best["ms"],
            "choice_rows": chosen["minibatch_rows"] if chosen else None, "choice_ms": chosen["ms"] if chosen else None,
            "choice_over_best": chosen["ms"] / best["ms"] if chosen else None}


def evaluate_policy(doc: dict[str, Any], policy: str, pass_: str = "fwd") -> list[dict[str, Any]]:
    """Where a registered minibatch policy lands on a saved sweep: its rows (snapped to the nearest swept
    size, said so), that size's latency, and the ratio to the sweep's best."""
    spec = heuristics.DeviceSpec(doc["device_spec"]["name"], doc["device_spec"]["num_sms"])
    out = []
    for fields in doc["shapes"]:
        shape = MoEShape(fields["shape"], fields["tokens"], fields["hidden"], fields["intermediate"],
                         fields["experts"], fields["top_k"])
        rows = heuristics.get_policy(policy)(shape, spec, MoKConfig(expert_padding=doc["tile"]))
        recs = [r for r in doc["results"] if r["shape"] == shape.name and r["pass"] == pass_ and r["ms"]]
        if not recs:
            continue
        nearest = min(recs, key=lambda r: (abs(r["minibatch_rows"] - rows), r["minibatch_rows"]))
        best = min(recs, key=lambda r: r["ms"])
        out.append({"shape": shape.name, "policy": policy, "policy_rows": rows,
                    "evaluated_at_rows": nearest["minibatch_rows"], "snapped": nearest["minibatch_rows"] != rows,
                    "ms": nearest["ms"], "best_rows": best["minibatch_rows"], "best_ms": best["ms"],
                    "over_best": nearest["ms"] / best["ms"]})
    return out


# ----------------------------------------------------------------------------------------------------------
# Study 3: SM waves of one expert GEMM
# ----------------------------------------------------------------------------------------------------------
def wave_thresholds() -> list[dict[str, Any]]:
    """Two-wave token thresholds of the four models on B300/GB300 (148 SMs) and H200 (132 SMs)."""
    rows = []
    for name, spec in MODELS.items():
        for device in (heuristics.GB300, heuristics.B300, heuristics.H200):
            gate_up = heuristics.column_tiles(2 * spec.intermediate)
            down = heuristics.column_tiles(spec.hidden)
            rows.append({"model": name, "device": device.name, "sms": device.num_sms, "hidden": spec.hidden,
                         "intermediate": spec.intermediate, "gate_up_column_tiles": gate_up,
                         "down_column_tiles": down,
                         "threshold_rows": heuristics.two_wave_threshold(spec.hidden, spec.intermediate, device)})
    return rows


def wave_sweep_params(mode: str) -> dict[str, Any]:
    if mode == "full":
        return dict(models=list(MODELS), m_values=list(range(128, 8192 + 1, 128)), block_m=128, block_n=256,
                    warmup=5, iters=20, impls=("torch.matmul", "tile_gemm"))
    return dict(models=["tiny"], m_values=[16, 32, 48, 64], block_m=16, block_n=32, warmup=0, iters=1,
                impls=("torch.matmul", "tile_gemm"))


def sm_wave_study(mode: str, **overrides) -> dict[str, Any]:
    """Latency of one expert's gate/up GEMM (``[M, H] x [H, 2I]``) against its token count M."""
    from .wave_gemm import tile_gemm

    params = {**wave_sweep_params(mode), **overrides}
    device = study_device(mode)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    spec = heuristics.device_spec(device)
    gen = torch.Generator(device="cpu").manual_seed(0)
    dims = {name: (MODELS[name].hidden, MODELS[name].intermediate) for name in params["models"] if name in MODELS}
    if "tiny" in params["models"]:
        dims["tiny"] = (64, 32)
    records, checks = [], {}
    for model, (hidden, inter) in dims.items():
        n = 2 * inter
        weight = (torch.randn(n, hidden, generator=gen) * hidden ** -0.5).to(device=device, dtype=dtype)
        a_sets = [torch.randn(max(params["m_values"]), hidden, generator=gen).to(device=device, dtype=dtype)
                  for _ in range(2)]
        # The Triton GEMM must compute what torch computes before its timings mean anything.
        probe = a_sets[0][: params["m_values"][0] + 3]
        got = torch.full((probe.shape[0], n), float("nan"), dtype=dtype, device=device)  # poison
        tile_gemm(probe, weight, out=got, block_m=params["block_m"], block_n=params["block_n"],
                  block_k=16 if mode == "small" else 64)
        got = got.float()
        want = probe.double() @ weight.double().T
        checks[model] = rel = float((got.double() - want).norm() / want.norm())
        if rel > (2e-2 if dtype == torch.bfloat16 else 1e-5):
            raise AssertionError(f"tile_gemm disagrees with fp64 on {model}: relative error {rel:.2e}")
        for impl in params["impls"]:
            for m in params["m_values"]:
                if impl == "torch.matmul":
                    call = lambda i, m=m: a_sets[i][:m] @ weight.T  # noqa: E731
                else:
                    call = lambda i, m=m: tile_gemm(a_sets[i][:m], weight, block_m=params["block_m"],  # noqa: E731
                                                    block_n=params["block_n"],
                                                    block_k=16 if mode == "small" else 64)
                timing = harness.time_fn(call, device=device, n_sets=2, warmup=params["warmup"],
                                         iters=params["iters"])
                tiles = heuristics.gemm_tiles(m, n, params["block_m"], params["block_n"])
                records.append({"model": model, "impl": impl, "m": m, "n": n, "k": hidden, "ms": timing.median_ms,
                                "tflops": harness.tflops(2 * m * n * hidden, timing.median_ms), "tiles": tiles,
                                "waves": math.ceil(tiles / spec.num_sms)})
        del weight, a_sets
        harness.free_memory(device)
    meta = harness.collect_metadata(device)
    return {"schema": "mok.sm_waves/1", "mode": mode, "metadata": meta,
            "params": {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()},
            "device_spec": {"name": spec.name, "num_sms": spec.num_sms}, "tile_gemm_rel_err": checks,
            "results": records, "thresholds": wave_thresholds()}

