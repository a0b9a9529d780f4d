"""End-to-end check: train a small MoE transformer with each backend; tokens/s and bit-for-bit loss curves.

The model is a few pre-norm transformer blocks (causal attention, then a DeepSeek-style MoE: routed SwiGLU
experts plus one shared expert, through ``mok.MoELayer``), trained on a synthetic next-token task: a fixed-seed
sparse Markov chain (each token has a few possible successors with fixed probabilities), so the loss has a known
floor (the chain's entropy rate) and every run sees exactly the same batches.

For every backend that runs here it reports:

* tokens per second (forward + backward + AdamW step, after warm-up steps);
* whether two identical runs give **bit-identical** loss curves and final weights;
* whether the same run with the experts split over **4 emulated expert-parallel ranks** (``ep_size=4``) gives
  bit-identical loss curves to ``ep_size=1``.

mok's backends (``reference``, ``triton``, ``cuda``) promise both; the PyTorch baselines (``torch``, ``naive``)
are reported, not held to it. Everything outside the MoE layers is made deterministic
(``torch.use_deterministic_algorithms``, hand-written attention), so a mismatch points at the MoE layer.

Usage::

    python experiments/train_tiny_moe.py --quick            # CPU, tiny sizes, a few steps (CI)
    python experiments/train_tiny_moe.py                     # GPU: every available backend, saves results
    python experiments/train_tiny_moe.py --backends triton,cuda --steps 100

Exit status: 0 when every mok backend was deterministic, 1 otherwise (2 when no backend ran).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS; must precede CUDA init

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import mok  # noqa: E402
from mok.bench import harness  # noqa: E402

BASELINE_BACKENDS = ("torch", "naive")  # PyTorch layers: reported, not required to be deterministic


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the model, the data and the run."""

    vocab: int = 64
    dim: int = 256
    layers: int = 2
    heads: int = 4
    experts: int = 8
    top_k: int = 2
    intermediate: int = 256
    shared_experts: int = 1
    seq: int = 128
    batch: int = 32
    steps: int = 60
    warmup_steps: int = 3
    lr: float = 3e-3
    successors: int = 4  # Markov chain: possible next tokens per token
    seed: int = 0

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.seq


QUICK = TinyConfig(vocab=32, dim=32, layers=2, heads=2, experts=8, top_k=2, intermediate=16, seq=16, batch=4,
                   steps=4, warmup_steps=1)


# ----------------------------------------------------------------------------------------------------------
# Data: a fixed sparse Markov chain
# ----------------------------------------------------------------------------------------------------------
class MarkovData:
    """Batches from a fixed-seed sparse Markov chain; batch ``i`` is the same in every run."""

    def __init__(self, cfg: TinyConfig, device: torch.device) -> None:
        gen = torch.Generator().manual_seed(cfg.seed + 1)
        self.cfg, self.device = cfg, device
        successors = torch.stack([torch.randperm(cfg.vocab, generator=gen)[:cfg.successors] for _ in range(cfg.vocab)])
        probs = torch.rand(cfg.vocab, cfg.successors, generator=gen) + 0.2
        probs /= probs.sum(1, keepdim=True)
        self.transition = torch.zeros(cfg.vocab, cfg.vocab).scatter_(1, successors, probs)
        stationary = torch.full((cfg.vocab,), 1.0 / cfg.vocab)
        for _ in range(200):
            stationary = stationary @ self.transition
        logs = torch.where(self.transition > 0, self.transition.log(), torch.zeros(()))
        self.entropy_rate = float(-(stationary[:, None] * self.transition * logs).sum())

    def batch(self, step: int) -> torch.Tensor:
        """``[batch, seq + 1]`` int64 token ids for step ``step``."""
        gen = torch.Generator().manual_seed(self.cfg.seed * 100_003 + step)
        tokens = torch.empty(self.cfg.batch, self.cfg.seq + 1, dtype=torch.int64)
        tokens[:, 0] = torch.randint(self.cfg.vocab, (self.cfg.batch,), generator=gen)
        for t in range(self.cfg.seq):
            tokens[:, t + 1] = torch.multinomial(self.transition[tokens[:, t]], 1, generator=gen).squeeze(1)
        return tokens.to(self.device)


# ----------------------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


class Block(nn.Module):
    """Pre-norm block: causal self-attention, then the MoE (routed experts + shared expert)."""

    def __init__(self, cfg: TinyConfig, backend: str, ep_size: int, moe_dtype: torch.dtype) -> None:
        super().__init__()
        self.heads, self.moe_dtype = cfg.heads, moe_dtype
        self.norm1, self.norm2 = RMSNorm(cfg.dim), RMSNorm(cfg.dim)
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.proj = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.moe = mok.MoELayer(cfg.dim, cfg.intermediate, cfg.experts, cfg.top_k,
                                num_shared_experts=cfg.shared_experts, backend=backend, ep_size=ep_size,
                                dtype=moe_dtype)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        # Written out (not SDPA) so that its backward is deterministic on every device.
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        weights = scores.masked_fill(causal, float("-inf")).softmax(-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.moe(self.norm2(x).to(self.moe_dtype)).float()


class TinyMoE(nn.Module):
    def __init__(self, cfg: TinyConfig, backend: str, ep_size: int, moe_dtype: torch.dtype) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.vocab, cfg.dim)
        self.blocks = nn.ModuleList(Block(cfg, backend, ep_size, moe_dtype) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.dim)
        self.head = nn.Linear(cfg.dim, cfg.vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


# ----------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------
def _bits(values: list[float]) -> list[str]:
    """fp32 bit patterns as hex, so curves compare bit for bit (and -0.0 differs from +0.0)."""
    return [f"{v:08x}" for v in torch.tensor(values, dtype=torch.float32).view(torch.int32).tolist()]


def weights_digest(model: nn.Module) -> str:
    """A hash of every parameter's bytes: equal digests mean bit-identical weights."""
    import hashlib
    digest = hashlib.sha1()
    for name, p in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(p.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()[:16]


def train(cfg: TinyConfig, backend: str, ep_size: int, device: torch.device, moe_dtype: torch.dtype,
          data: MarkovData) -> dict:
    """One training run; returns losses (and their bits), tokens/s and a digest of the final weights."""
    torch.manual_seed(cfg.seed)
    model = TinyMoE(cfg, backend, ep_size, moe_dtype).to(device)  # built on the CPU: same init on every device
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0, foreach=False)
    losses, timed_tokens, timed_seconds = [], 0, 0.0
    for step in range(cfg.steps):
        batch = data.batch(step)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab).float(), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))  # synchronises: the step is done
        if step >= cfg.warmup_steps:
            timed_seconds += time.perf_counter() - start
            timed_tokens += cfg.tokens_per_step
    return {"backend": backend, "ep_size": ep_size, "losses": losses, "loss_bits": _bits(losses),
            "tokens_per_s": timed_tokens / timed_seconds if timed_seconds else None,
            "weights_digest": weights_digest(model)}


def usable_backends(spec: str, device: torch.device, precision: str) -> tuple[list[str], dict[str, str]]:
    """``(backends that run a small problem here, {skipped backend: reason})`` of ``spec`` (a comma list or
    ``"auto"``: every registered backend)."""
    from mok.bench.cli import probe_backend

    names = mok.available_backends() if spec == "auto" else [s for s in spec.split(",") if s]
    usable, skipped = [], {}
    for name in names:
        reason = probe_backend(name, device, precision)
        if reason is None:
            usable.append(name)
        else:
            skipped[name] = reason
    return usable, skipped


def plot_losses(doc: dict, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for run in doc["runs"]:
        if run["role"] == "first":
            ax.plot(run["losses"], label=f"{run['backend']} ({run['tokens_per_s'] or 0:,.0f} tok/s)")
    ax.axhline(doc["entropy_rate"], color="gray", ls=":", label="entropy rate (loss floor)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    ax.set_title(f"tiny MoE on {doc['metadata'].get('gpu') or doc['metadata']['device_type']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="tiny sizes and a few steps (CPU, CI)")
    p.add_argument("--backends", default="auto", help="comma list, or 'auto' (every backend that runs here)")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--ep", type=int, default=4, help="emulated EP degree compared with EP 1")
    p.add_argument("--device", default=None)
    p.add_argument("--out", default=None, help="results folder (default experiments/results; --quick saves only if given)")
    args = p.parse_args(argv)

    cfg = QUICK if args.quick else TinyConfig()
    if args.steps:
        cfg = TinyConfig(**{**asdict(cfg), "steps": args.steps})
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.use_deterministic_algorithms(True, warn_only=True)
    moe_dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    precision = "bf16" if moe_dtype == torch.bfloat16 else "fp32"
    backends, skipped = usable_backends(args.backends, device, precision)
    for name, reason in skipped.items():
        print(f"skip backend {name}: {reason}")
    if not backends:
        print("no backend runs here", file=sys.stderr)
        return 2
    data = MarkovData(cfg, device)
    print(f"tiny MoE: {cfg.layers} layers, dim {cfg.dim}, {cfg.experts} experts top-{cfg.top_k} + "
          f"{cfg.shared_experts} shared, {cfg.tokens_per_step} tokens/step, {cfg.steps} steps on {device} "
          f"({precision}); loss floor (entropy rate) {data.entropy_rate:.4f}")

    metadata = harness.collect_metadata(device)
    out_dirs = harness.output_dirs(args.out) if (args.out or not args.quick) else []
    runs, summary = [], []
    for backend in backends:
        first = train(cfg, backend, 1, device, moe_dtype, data)
        second = train(cfg, backend, 1, device, moe_dtype, data)
        supports_ep = mok.get_backend(backend).supports_ep and cfg.experts % args.ep == 0
        emulated = train(cfg, backend, args.ep, device, moe_dtype, data) if supports_ep else None
        runs += [{**first, "role": "first"}, {**second, "role": "repeat"}]
        if emulated:
            runs.append({**emulated, "role": f"ep{args.ep}"})
        row = {"backend": backend, "tokens_per_s": first["tokens_per_s"], "final_loss": first["losses"][-1],
               "repeat_bitwise": first["loss_bits"] == second["loss_bits"]
               and first["weights_digest"] == second["weights_digest"],
               "ep_bitwise": None if emulated is None else first["loss_bits"] == emulated["loss_bits"]
               and first["weights_digest"] == emulated["weights_digest"],
               "held_to_determinism": backend not in BASELINE_BACKENDS}
        summary.append(row)
        ep_text = "n/a" if row["ep_bitwise"] is None else ("yes" if row["ep_bitwise"] else "NO")
        print(f"{backend:<10} {row['tokens_per_s'] or 0:12,.0f} tokens/s  final loss {row['final_loss']:.4f}  "
              f"repeat bit-identical: {'yes' if row['repeat_bitwise'] else 'NO'}  "
              f"EP1 vs EP{args.ep} bit-identical: {ep_text}", flush=True)
        doc = {"schema": "mok.train_tiny_moe/1", "metadata": metadata, "config": asdict(cfg),
               "entropy_rate": data.entropy_rate, "ep_compared": args.ep, "skipped_backends": skipped,
               "summary": summary, "runs": runs}
        for folder in out_dirs:  # after every backend: a run cut short by a time limit keeps what it measured
            harness.write_json(doc, folder / "train_tiny_moe.json")
            plot_losses(doc, folder / "train_tiny_moe.png")
    for folder in out_dirs:
        print(f"wrote {folder / 'train_tiny_moe.json'}")
    broken = [r["backend"] for r in summary if r["held_to_determinism"]
              and not (r["repeat_bitwise"] and r["ep_bitwise"] is not False)]
    if broken:
        print(f"NOT deterministic: {', '.join(broken)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
