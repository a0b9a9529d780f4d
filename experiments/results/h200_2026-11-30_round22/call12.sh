# Round 22, call 12 (the schedule's sort on 16-bit keys, committed just before): the sort alone, 32-bit against 16-bit
# keys at the bench's slot counts (no build needed); then the GPU tests of the schedule tables and of the layer.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 40 python3 experiments/schedule_sort_bench.py > $K/sort_bench.log 2>&1; echo sort rc=$?; cat $K/sort_bench.log
timeout 140 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "kernel_schedule or repeated or bitwise_repeatable or identical_across_ep" > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
