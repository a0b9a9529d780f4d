# Round 24, call 4 (7b8ce74 + the sort's column sums read by all threads + run_start from the sort into the offsets
# kernel; MOK_GIT_COMMIT set by hand): the sort's and the tables' GPU tests (both sorts), racecheck / memcheck of a
# 2**20-slot sort, the sort bench, the layer A/B (torch's sort and searched run_start against the counting sort and its
# run_start) at anchor-1, anchor-2 and the qwen and kimi slices, and cuda_breakdown.py (the schedule's share).
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
for run in 1 2; do timeout 100 python3 experiments/ab_layer.py --grad --env-a MOK_CUDA_SCHEDULE_SORT=torch --env-b MOK_CUDA_SCHEDULE_SORT=auto anchor-1 anchor-2 qwen3.5-397b/ep64 kimi-k2.7/ep64 > $K/ab_layer_sort_$run.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_layer_sort_$run.log; done
timeout 150 python3 experiments/cuda_breakdown.py --out $K > $K/breakdown.log 2>&1; echo breakdown rc=$?; tail -11 $K/breakdown.log | cut -c1-60,380-
