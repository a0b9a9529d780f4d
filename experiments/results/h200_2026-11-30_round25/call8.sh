# Round 25, call 8 (MOK_GIT_COMMIT by hand): was call 7's qwen slice (1.031 ms, against 0.921 in call 2's profile) the
# router kernel? The bench's layer with its router inside, MOK_ROUTER=cublas (A) against the kernel (B), in rotation.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 200 python3 experiments/ab_layer.py --router --env-a MOK_ROUTER=cublas --env-b MOK_ROUTER=kernel qwen3.5-397b/ep64 kimi-k2.7/ep64 glm-5.2/ep64 deepseek-v4-pro/ep64 > $K/ab_router.log 2>&1; echo ab rc=$?; grep -v Warn $K/ab_router.log
