# For the next GPU session (round 24), call 2 (about 4 minutes, warm): patches/sort_all_slots.patch raises the counting
# sort's limit from 32,768 to 1,048,576 slots, so that the anchors' schedules (65,536 to 524,288 slots) use it too
# (written after round 23's last call: it compiles and the CPU tests of the limits pass, nothing has run; it also carries
# the round's review mends: the shared-memory opt-in at the largest size, 1-D ids only, more test cases). Its GPU tests
# (now up to 2**20 slots), the sort's GPU time at the anchors against torch.sort, racecheck / memcheck on a 2**20-slot
# sort, and the layer A/B (torch's sort against the counting sort) at anchors 1, 5 and 2. Merge if the tests pass and
# the A/B gains; if anchor-2's sort (128 CTAs, each reading its experts' column of 128 CTA counts) is slower than
# torch.sort there, cap the limit below its slot count instead. Run from the repository root with $OUT set.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K; P=experiments/results/h200_2026-11-30_round23/patches/sort_all_slots.patch
git apply $P && echo applied || exit 1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "counting_sort or kernel_schedule or binding_refusals" > $K/tests_sort.log 2>&1; echo tests rc=$?; tail -2 $K/tests_sort.log
timeout 60 python3 experiments/schedule_sort_bench.py --iters 100 > $K/sort_bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/sort_bench.log
SORT='import torch; from mok.cuda.build import load_extension; ext = load_extension()
for n, e in ((1 << 20, 256), (196608, 128), (1 << 20, 1024)):
    ids = torch.randint(0, e, (n,), device="cuda", dtype=torch.int32); v, i = ext.expert_sort(ids, e); w = torch.sort(ids, stable=True)
    assert torch.equal(v, w.values) and torch.equal(i, w.indices), (n, e)
torch.cuda.synchronize(); print("sorted")'
for tool in racecheck memcheck; do timeout 90 compute-sanitizer --tool $tool --error-exitcode 9 python3 -c "$SORT" > $K/sort_$tool.log 2>&1; echo sort-$tool rc=$?; tail -1 $K/sort_$tool.log; done
timeout 150 python3 experiments/ab_layer.py --grad --env-a MOK_CUDA_SCHEDULE_SORT=torch --env-b MOK_CUDA_SCHEDULE_SORT=auto anchor-1 anchor-5 anchor-2 > $K/ab_layer_sort.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_layer_sort.log
git apply -R $P
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
