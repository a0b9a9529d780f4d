# Round 24, call 5 (call 4's tree + the sort's same-expert lanes by one ballot per bit of the id instead of
# __match_any_sync; MOK_GIT_COMMIT set by hand): as call 4 (tests, sanitizers of the sort, the sort bench, the layer
# A/B of the sort, cuda_breakdown.py), the A/B at anchor-5 too, and the forward's kernels profiled at anchor-1 and the
# qwen slice (what the schedule's kernels take).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "counting_sort or kernel_schedule or binding_refusals" > $K/tests_sort.log 2>&1; echo tests rc=$?; tail -2 $K/tests_sort.log
SORT='import torch; from mok.cuda.build import load_extension; ext = load_extension()
for n, e in ((1 << 20, 256), (196608, 128), (1 << 20, 1024), (16384, 6)):
    ids = torch.randint(0, e, (n,), device="cuda", dtype=torch.int32); v, i, r = ext.expert_sort(ids, e); w = torch.sort(ids, stable=True)
    assert torch.equal(v, w.values) and torch.equal(i, w.indices), (n, e)
    assert torch.equal(r, torch.searchsorted(w.values, torch.arange(e + 1, device="cuda", dtype=torch.int32)).int()), (n, e)
torch.cuda.synchronize(); print("sorted")'
for tool in racecheck memcheck; do timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 -c "$SORT" > $K/sort_$tool.log 2>&1; echo sort-$tool rc=$?; tail -1 $K/sort_$tool.log; done
timeout 60 python3 experiments/schedule_sort_bench.py --iters 100 > $K/sort_bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/sort_bench.log
for run in 1 2; do timeout 120 python3 experiments/ab_layer.py --grad --env-a MOK_CUDA_SCHEDULE_SORT=torch --env-b MOK_CUDA_SCHEDULE_SORT=auto anchor-1 anchor-5 anchor-2 qwen3.5-397b/ep64 kimi-k2.7/ep64 > $K/ab_layer_sort_$run.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_layer_sort_$run.log; done
timeout 100 python3 experiments/profile_forward.py anchor-1 qwen3.5-397b/ep64 --backends cuda > $K/profile_forward.log 2>&1; echo prof rc=$?; grep -E "bench fwd|^ +[0-9.]+ +[0-9.]+ " $K/profile_forward.log | head -34
timeout 150 python3 experiments/cuda_breakdown.py --out $K > $K/breakdown.log 2>&1; echo breakdown rc=$?
python3 -c "
import json, glob; d = json.load(open(sorted(glob.glob('$K/cuda_breakdown_*.json'))[-1]))
for r in d['shapes']: print(f\"{r['shape']:22s} layer {r['layer_ms']:.3f} ms, schedule gpu {r['schedule_gpu_ms'] * 1e3:.1f} us, share {r['schedule_share_pct']:.2f}%\")"
