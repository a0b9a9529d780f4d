# Round 25, call 2 (da2f552; MOK_GIT_COMMIT by hand): the fused routing is the default on CUDA now. The whole GPU suite
# (every comparison routed by mok.route runs through the kernel's weights), then the bench's forward profiled at the
# qwen and kimi slices (which small kernels are left around the megakernel).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=da2f552
K=$OUT/k; mkdir -p $K
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -4 $K/suite.log
timeout 150 python3 experiments/profile_forward.py qwen3.5-397b/ep64 kimi-k2.7/ep64 > $K/profile_forward.log 2>&1; echo fwdprofile rc=$?; grep -v Warn $K/profile_forward.log | head -80
