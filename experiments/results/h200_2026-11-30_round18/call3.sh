# Round 18, call 3: one build launched two ways: ring mode (the auto choice at I = 1024 and 2048, with store warps)
# against gather mode (auto down span 8) at anchor-3 and the qwen slice (I = 1024), and anchor-4 (I = 2048).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=586e72d
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 300 python3 experiments/ab_kernels.py --rounds 8 --launch-a dispatch=ring --launch-b dispatch=gather anchor-3 qwen3.5-397b/ep64 anchor-4 > $K/ab_gather.log 2>&1; echo ab rc=$?; tail -5 $K/ab_gather.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
