"""EXPERIMENT (round 7): the megakernel alone with and without the saved gate/up rows (training), interleaved."""
import statistics, sys
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parent))
import torch
from cuda_breakdown import SHAPES, Problem
from mok.cuda import backend
from mok.cuda.schedule_tables import build_kernel_schedule
from mok.cuda.workspace import release_workspaces

for name in sys.argv[1:] or ["anchor-1", "anchor-3", "anchor-4", "anchor-5", "kimi-k2.7/ep64"]:
    shape = SHAPES[name]
    p = Problem(shape, n_sets=2)
    preps = [backend.prepare(*p.args(j), schedule=build_kernel_schedule(p.routes[j][1], shape.num_experts)) for j in range(2)]
    saved = [backend.saved_gate_up_buffer(preps[j]) for j in range(2)]
    configs = {"off": lambda j: backend.launch(preps[j]), "on": lambda j: backend.launch(preps[j], saved_gate_up=saved[j])}
    samples = {k: [] for k in configs}
    for fn in configs.values():
        fn(0); fn(1)
    for _ in range(8):
        for k, fn in configs.items():
            for j in range(4):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record(); fn(j % 2); b.record(); b.synchronize(); samples[k].append(a.elapsed_time(b))
    backend.check_error(preps[0])
    off, on = statistics.median(samples["off"]), statistics.median(samples["on"])
    print(f"{name}: kernel {off:.3f} ms without saved rows, {on:.3f} ms with ({100 * (on / off - 1):+.1f}%), "
          f"{shape.forward_flops / off / 1e9:.0f} / {shape.forward_flops / on / 1e9:.0f} TFLOP/s", flush=True)
    del preps, saved, p
    release_workspaces(); torch.cuda.empty_cache()
