"""Round 19: the layer as a user calls it (mok.moe, backend="cuda", no_grad) with the down rows pushed into the
combine slots (MOK_CUDA_DOWN_TMA=0) or stored by TMA (auto, the default in gather mode), timed in rotation
(harness.time_rotated), plus y_rows_table alone. Run from the repository root on the H200."""
import os
import sys

import torch

sys.path.insert(0, "experiments")
import mok  # noqa: E402
from cuda_breakdown import SHAPES, Problem  # noqa: E402
from mok.bench import harness  # noqa: E402
from mok.cuda import backend  # noqa: E402
from mok.cuda.schedule_tables import build_kernel_schedule  # noqa: E402

for name in sys.argv[1:] or ["anchor-2", "anchor-1"]:
    shape = SHAPES[name]
    p = Problem(shape, n_sets=2)

    def layer(value):
        def call(j):
            os.environ["MOK_CUDA_DOWN_TMA"] = value
            with torch.no_grad():
                return mok.moe(*p.args(j), backend="cuda", check_inputs=False)
        return call

    fns = {"push": layer("0"), "down_tma": layer("auto")}
    out = {label: fn(0).clone() for label, fn in fns.items()}
    same = torch.equal(out["push"].view(torch.int16), out["down_tma"].view(torch.int16))
    t = harness.time_rotated(fns, device="cuda", n_sets=2, rounds=6, calls=4)
    schedule = build_kernel_schedule(p.routes[0][1], shape.num_experts)
    inv = harness.time_rotated({"y_rows_table": lambda j: backend.y_rows_table(schedule)}, device="cuda")
    backend.check_pending_errors()
    ms = {k: v.median_ms for k, v in t.items()}
    print(f"{name}: layer push {ms['push']:.3f} ms, down_tma {ms['down_tma']:.3f} ms, ratio "
          f"{ms['down_tma'] / ms['push']:.3f}; bitwise equal {same}; y_rows_table "
          f"{inv['y_rows_table'].median_ms * 1e3:.1f} us", flush=True)
    del p, out
    from mok.cuda.workspace import release_workspaces
    release_workspaces()
    torch.cuda.empty_cache()
