# Round 23, call 8 (branch multi-cta-sort on f8b40e4 + e38f76a's notes; the last ~280 s of the session's device time):
# the counting sort over ceil(N / 4096) CTAs in two kernels instead of one CTA. Its GPU tests and the schedule tables'
# (bitwise torch.sort's order; tables equal build_schedule's), the sort's GPU time against torch.sort (CUDA-graph
# replays), then racecheck, memcheck and synccheck of the sort alone. Files land in $OUT/k as they are written (the
# call may be cut by the budget).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "counting_sort or kernel_schedule or binding_refusals" > $K/tests_sort.log 2>&1; echo tests rc=$?; tail -2 $K/tests_sort.log
timeout 40 python3 experiments/schedule_sort_bench.py --iters 100 > $K/sort_bench.log 2>&1; echo bench rc=$?; cat $K/sort_bench.log | grep -v Warn
SORT='import torch; from mok.cuda.build import load_extension; ext = load_extension()
for n, e in ((20480, 8), (32767, 1024), (1000, 6), (8193, 3)):
    ids = torch.randint(0, e, (n,), device="cuda", dtype=torch.int32); v, i = ext.expert_sort(ids, e); w = torch.sort(ids, stable=True)
    assert torch.equal(v, w.values) and torch.equal(i, w.indices), (n, e)
torch.cuda.synchronize(); print("sorted")'
for tool in racecheck memcheck synccheck; do timeout 40 compute-sanitizer --tool $tool --error-exitcode 9 python3 -c "$SORT" > $K/sort_$tool.log 2>&1; echo sort-$tool rc=$?; tail -1 $K/sort_$tool.log; done
