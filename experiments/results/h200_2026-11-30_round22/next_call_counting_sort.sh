# For the next GPU session (round 23), after next_call.sh (about 4 minutes, warm): the schedule's counting sort
# (patches/counting_sort.patch, written in round 22 after the last GPU call: it compiles for sm_90a without spills and
# the binding type-checks, nothing more). Applies it, runs its GPU tests (bitwise torch.sort's order; the tables equal
# build_schedule's with either sort) and the schedule and layer tests, then times the layer as users call it with
# torch's sort against the counting sort at the EP-64 slices (MOK_CUDA_SCHEDULE_SORT). Merge the patch if the tests pass
# and the A/B gains. Run from the repository root with $OUT set.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
git apply experiments/results/h200_2026-11-30_round22/patches/counting_sort.patch && echo applied || exit 1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "sort or kernel_schedule or repeated or bitwise_repeatable" > $K/tests_sort.log 2>&1; echo tests rc=$?; tail -2 $K/tests_sort.log
# The sanitizers on the sort alone (an intra-warp race would rarely show in a comparison of outputs).
SORT='import torch; from mok.cuda.build import load_extension; ext = load_extension()
for n, e in ((20480, 8), (32767, 1024), (1000, 6)):
    ids = torch.randint(0, e, (n,), device="cuda", dtype=torch.int32); v, i = ext.expert_sort(ids, e); w = torch.sort(ids, stable=True)
    assert torch.equal(v, w.values) and torch.equal(i, w.indices), (n, e)
torch.cuda.synchronize(); print("sorted")'
for tool in racecheck synccheck memcheck; do timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 python3 -c "$SORT" > $K/sort_$tool.log 2>&1; echo sort-$tool rc=$?; tail -1 $K/sort_$tool.log; done
timeout 120 python3 experiments/ab_layer.py --grad --env-a MOK_CUDA_SCHEDULE_SORT=torch --env-b MOK_CUDA_SCHEDULE_SORT=auto qwen3.5-397b/ep64 kimi-k2.7/ep64 glm-5.2/ep64 deepseek-v4-pro/ep64 > $K/ab_layer_sort.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_layer_sort.log
git apply -R experiments/results/h200_2026-11-30_round22/patches/counting_sort.patch
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
