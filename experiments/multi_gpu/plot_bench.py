"""Plots of the multi-GPU bench (``torchrun ... -m mok.dist_cli bench``): layer forward time per backend, and
push vs pull transfer bandwidth, from the JSON records it writes.

    python3 experiments/multi_gpu/plot_bench.py --layers uniform.json zipf.json --transfers transfers.json \\
        --out experiments/results/multi_gpu/x2_2026-11-29_round9/bench_x2.png

``--layers`` takes records with ``layers`` (one panel per record, titled by its routing); ``--transfers`` one
record with ``transfers`` (two panels: the average per GPU under uniform routing, the busiest GPU under Zipf).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TRANSFERS = ("pull_dispatch", "push_dispatch", "push_combine", "pull_combine", "nccl_all_to_all_dispatch",
             "nccl_all_to_all_combine")
COLORS = {"nccl": "#7f7f7f", "reference": "#bcbd22", "triton": "#1f77b4", "cuda": "#d62728"}


def layer_rows(record: dict) -> tuple[list[str], dict[str, list[float]]]:
    """Models (in record order) and, per backend, forward ms per model (NaN where missing or failed)."""
    models, backends = [], []
    for key in record["layers"]:
        model, backend = key.rsplit("/", 1)
        if model not in models:
            models.append(model)
        if backend not in backends:
            backends.append(backend)
    ms = {b: [record["layers"].get(f"{m}/{b}", {}).get("forward_ms", float("nan")) for m in models]
          for b in backends}
    return models, ms


def transfer_rows(record: dict, routing: str, figure: str) -> tuple[list[str], dict[str, list[float]]]:
    """Models and, per transfer, GB/s (``figure``: ``avg_GBps_per_gpu`` or ``busiest_GBps``) under ``routing``."""
    keys = [k for k in record["transfers"] if k.endswith("/" + routing)]
    models = [k.rsplit("/", 1)[0] for k in keys]
    rates = {t: [record["transfers"][k].get(t, {}).get(figure, float("nan")) for k in keys] for t in TRANSFERS}
    return models, rates


def _bars(ax, models: list[str], series: dict[str, list[float]], colors: dict[str, str] | None = None) -> None:
    width = 0.8 / max(1, len(series))
    for i, (name, values) in enumerate(series.items()):
        xs = [m + (i - (len(series) - 1) / 2) * width for m in range(len(models))]
        ax.bar(xs, values, width, label=name, color=(colors or {}).get(name))
    ax.set_xticks(range(len(models)), [m.split("-")[0] for m in models])
    ax.grid(axis="y", alpha=0.3)


def plot(layer_records: list[dict], transfer_record: dict | None, out: Path) -> Path:
    import matplotlib  # noqa: PLC0415 (optional dependency, only for this script)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    panels = len(layer_records) + (2 if transfer_record else 0)
    fig, axes = plt.subplots(1, panels, figsize=(5.2 * panels, 4.2), squeeze=False)
    axes = list(axes[0])
    for record in layer_records:
        ax = axes.pop(0)
        models, ms = layer_rows(record)
        _bars(ax, models, ms, COLORS)
        for b, values in ms.items():
            if b == "nccl" or "nccl" not in ms:
                continue
            for m, v in enumerate(values):  # the forward speed-up over the NCCL baseline above each bar
                base = ms["nccl"][m]
                if v == v and base == base:
                    i = list(ms).index(b)
                    x = m + (i - (len(ms) - 1) / 2) * 0.8 / len(ms)
                    ax.annotate(f"{base / v:.2f}x", (x, v), ha="center", va="bottom", fontsize=7)
        ax.set_ylabel("forward ms (slowest rank)")
        ax.set_title(f"{record.get('gpu_count', '?')} GPUs, {record['tokens_per_gpu']} tokens/GPU, "
                     f"{record['routing']} routing", fontsize=9)
        ax.legend(fontsize=7)
    if transfer_record:
        for routing, figure, label in (("uniform", "avg_GBps_per_gpu", "average per GPU, uniform"),
                                       ("zipf", "busiest_GBps", "busiest GPU, Zipf")):
            ax = axes.pop(0)
            models, rates = transfer_rows(transfer_record, routing, figure)
            _bars(ax, models, rates)
            ax.axhline(360, color="k", ls="--", lw=0.8)  # the goal: 80% of 450 GB/s per direction
            ax.set_ylabel("GB/s of remote bytes, with completion signal")
            ax.set_title(f"transfers: {label}", fontsize=9)
            ax.set_ylim(0, 1.4 * max(max(v) for v in rates.values() if v))  # room for the legend above
            ax.legend(fontsize=6, loc="upper center", ncol=3)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", nargs="*", default=[], help="bench JSON records with layer timings")
    parser.add_argument("--transfers", help="a bench JSON record with transfer timings")
    parser.add_argument("--out", required=True, help="PNG path")
    args = parser.parse_args(argv)
    if not args.layers and not args.transfers:
        parser.error("give --layers and/or --transfers")
    layers = [json.loads(Path(p).read_text()) for p in args.layers]
    transfers = json.loads(Path(args.transfers).read_text()) if args.transfers else None
    print(f"wrote {plot(layers, transfers, Path(args.out))}")


if __name__ == "__main__":
    main()
