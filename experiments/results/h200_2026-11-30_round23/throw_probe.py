"""Round 23: does a TORCH_CHECK that fails inside the extension raise RuntimeError, or crash the process?

Round 23's call 2 saw pytest die with a segmentation fault at the counting-sort test's refusal case (a TORCH_CHECK in
binding.cpp's expert_sort); the same kernel's sorts passed. Each case runs in its own process (a crash must not hide the
next); `python3 throw_probe.py CASE` runs one case in this process.
"""
import subprocess
import sys

import torch

CASES = {
    # TORCH_CHECKs that exist at HEAD (binding.cpp's schedule_tables).
    "schedule_tables_cpu": lambda ext: ext.schedule_tables(torch.zeros(8, dtype=torch.int32),
                                                           torch.zeros(8, dtype=torch.int64), 8, 1, 128, 128, 8),
    "schedule_tables_dtype": lambda ext: ext.schedule_tables(torch.zeros(8, dtype=torch.int64, device="cuda"),
                                                             torch.zeros(8, dtype=torch.int64, device="cuda"),
                                                             8, 1, 128, 128, 8),
    # The counting-sort patch's checks.
    "expert_sort_cpu": lambda ext: ext.expert_sort(torch.zeros(8, dtype=torch.int32), 8),
    "expert_sort_slots": lambda ext: ext.expert_sort(torch.zeros(32769, dtype=torch.int32, device="cuda"), 8),
    "expert_sort_experts": lambda ext: ext.expert_sort(torch.zeros(8, dtype=torch.int32, device="cuda"), 1025),
}


def run_one(case: str) -> None:
    from mok.cuda.build import load_extension
    ext = load_extension()
    if case.startswith("expert_sort") and not hasattr(ext, "expert_sort"):
        print(f"{case}: no expert_sort in this build")
        return
    try:
        CASES[case](ext)
        print(f"{case}: no error raised")
    except Exception as err:  # noqa: BLE001 (the type is what this probe reports)
        print(f"{case}: {type(err).__name__}: {str(err).splitlines()[0][:160]}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        run_one(sys.argv[1])
    else:
        for case in CASES:
            done = subprocess.run([sys.executable, __file__, case], capture_output=True, text=True, timeout=300)
            tail = (done.stdout.strip().splitlines() or [""])[-1]
            print(f"rc={done.returncode:4d}  {tail if done.returncode == 0 else case + ': ' + done.stderr.strip()[-200:]}")
