# Round 24, call 3 (a0ce4e4 + round 23's patches/sort_all_slots.patch applied + the one-process group's in-process
# store (dist_cli.init_distributed and the GPU tests' group: call 1's EADDRINUSE) + time_graph_ms capturing 16 calls
# per graph; MOK_GIT_COMMIT set by hand): the distributed GPU tests and the timing helper's, the sort's tests, the sort
# bench again (now without each replay's launch), the layer A/B of the sort at anchors 1, 5 and 2 three times
# (call 2: 0.982 / 1.009 / 1.032), and cuda_breakdown.py (the schedule's share) at the anchors and slices.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_distributed_gpu.py tests/test_bench.py "tests/test_cuda_gpu.py::test_counting_sort_equals_the_stable_torch_sort" > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 60 python3 experiments/schedule_sort_bench.py --iters 100 > $K/sort_bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/sort_bench.log
for run in 1 2 3; do timeout 100 python3 experiments/ab_layer.py --grad --env-a MOK_CUDA_SCHEDULE_SORT=torch --env-b MOK_CUDA_SCHEDULE_SORT=auto anchor-1 anchor-5 anchor-2 > $K/ab_layer_sort_$run.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_layer_sort_$run.log; done
timeout 150 python3 experiments/cuda_breakdown.py --out $K > $K/breakdown.log 2>&1; echo breakdown rc=$?; tail -14 $K/breakdown.log
