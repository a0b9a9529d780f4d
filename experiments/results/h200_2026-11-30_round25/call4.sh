# Round 25, call 4 (MOK_GIT_COMMIT by hand): the whole GPU suite with mok.router_logits in the layer and the bench
# (auto: the kernel for bf16 activations on CUDA), then router_logits_bench.py with tilings for the wide routers
# (anchors: the kernel at 64 x 128 x 64 lost to cuBLAS's bf16 GEMM in call 3) and the slices.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 experiments/router_logits_bench.py --shapes anchor-2 anchor-3 anchor-1 anchor-5 kimi-k2.7/ep64 qwen3.5-397b/ep64 --json $K/router_logits_tilings.json --tilings 128,128,64,8,3 128,128,64,8,4 128,64,64,4,4 128,256,64,8,3 64,16,128,4,4 128,16,64,4,4 32,16,128,4,4 > $K/router_logits_tilings.log 2>&1; echo tilings rc=$?; grep -v Warn $K/router_logits_tilings.log
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -4 $K/suite.log
