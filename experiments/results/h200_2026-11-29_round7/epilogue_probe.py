"""EXPERIMENT (round 7): what the megakernel's epilogue time is made of, and two candidate fixes. Times the kernel
alone (pipelined, each shape's default dispatch mode) with probe bits (mok/cuda/include/mok/workspace.cuh):
7 no comm, 8 no epilogue, 64 fast sigmoid, 128 leader-only gpu fence. The configurations are interleaved in
rounds (median of all rounds' calls) so that clock drift during the run does not favour one of them."""
import json, os, statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
from cuda_breakdown import SHAPES, Problem
from mok.cuda import backend
from mok.cuda.schedule_tables import build_kernel_schedule
from mok.cuda.workspace import release_workspaces

FLAGS = {"base": 0, "fast": 64, "leader_fence": 128, "fast+leader": 192, "no_comm": 7, "mainloop_only": 15}
ROUNDS, PER_ROUND = int(os.environ.get("PROBE_ROUNDS", 8)), 4


def timed(fn) -> list[float]:
    out = []
    for j in range(PER_ROUND):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(j % 2); b.record(); b.synchronize()
        out.append(a.elapsed_time(b))
    return out


rows = []
for name in (sys.argv[1:] or ["anchor-1", "anchor-2", "anchor-3", "anchor-4", "anchor-5", "kimi-k2.7/ep64",
                              "glm-5.2/ep64"]):
    shape = SHAPES[name]
    p = Problem(shape, n_sets=2)
    preps = [backend.prepare(*p.args(j), schedule=build_kernel_schedule(p.routes[j][1], shape.num_experts))
             for j in range(2)]
    mode = backend.resolve_dispatch(None, shape.intermediate)
    samples = {k: [] for k in FLAGS}
    for label, flags in FLAGS.items():  # warm-up
        timed(lambda j: backend.launch(preps[j], ablate=flags, dispatch=mode))
    for _ in range(ROUNDS):
        for label, flags in FLAGS.items():
            samples[label] += timed(lambda j: backend.launch(preps[j], ablate=flags, dispatch=mode))
    backend.check_error(preps[0])
    r = {"shape": name, "mode": mode, **{k: statistics.median(v) for k, v in samples.items()}}
    rows.append(r)
    print(f"{name} ({mode}) " + " ".join(f"{k}={r[k]:.3f}" for k in FLAGS)
          + f"  | fast {100 * (1 - r['fast'] / r['base']):+.1f}% leader {100 * (1 - r['leader_fence'] / r['base']):+.1f}%"
          f" both {100 * (1 - r['fast+leader'] / r['base']):+.1f}%", flush=True)
    del preps, p
    release_workspaces(); torch.cuda.empty_cache()
out = Path(os.environ.get("OUT", "."))
(out / "results").mkdir(parents=True, exist_ok=True)
(out / "results" / "epilogue_probe.json").write_text(json.dumps(rows, indent=1))
