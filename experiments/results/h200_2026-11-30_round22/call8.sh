# Round 22, call 8 (inline, warm after call 7; kernel as at 350c981): the bench's forward profiled at the kimi and qwen
# slices (`cuda` only): kernels per call, idle gaps, host synchronisations.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1; mkdir -p $OUT/k; timeout 200 python3 experiments/profile_forward.py kimi-k2.7/ep64 qwen3.5-397b/ep64 --backends cuda --sync-debug > $OUT/k/profile_forward.log 2>&1; echo rc=$?
