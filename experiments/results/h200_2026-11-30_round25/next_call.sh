# For the next GPU session (round 26), one call of about 5 minutes on nvidia-h200: the router's backward kernels
# (mok/triton_ref/router_logits_backward.py, written after round 25's last call; CPU-tested under the interpreter and
# compiled for sm_90, never run on a GPU). Their GPU tests (fp64 oracle, any token split, repeatable), then
# router_logits_bench.py --backward (the PyTorch ops of F.linear(x.float(), w)'s backward against the kernels, bf16 and
# fp32 weights, at the slices and anchors 1, 2, 5), then the layer's forward and backward with fp32 router weights,
# MOK_ROUTER_BACKWARD=torch (A) against kernel (B). If the kernels win, make "kernel" the default backward of the
# kernel and cuBLAS router methods (mok/router.py) and run the whole GPU suite.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_logits.py > $K/tests.log 2>&1; echo tests rc=$?; tail -3 $K/tests.log
timeout 120 python3 experiments/router_logits_bench.py --backward --shapes kimi-k2.7/ep64 glm-5.2/ep64 qwen3.5-397b/ep64 deepseek-v4-pro/ep64 anchor-1 anchor-2 anchor-5 --json $K/router_backward.json > $K/router_backward.log 2>&1; echo bench rc=$?; grep -v Warn $K/router_backward.log
timeout 120 python3 experiments/ab_layer.py --router --router-weights fp32 --backward --rounds 4 --env-a MOK_ROUTER_BACKWARD=torch --env-b MOK_ROUTER_BACKWARD=kernel kimi-k2.7/ep64 qwen3.5-397b/ep64 anchor-1 > $K/ab_router_backward.log 2>&1; echo ab rc=$?; grep -v Warn $K/ab_router_backward.log
# The bench's own router weights are bf16: its training step's router backward, the PyTorch ops (fp32 GEMMs since round
# 25) against the kernels, at anchor-2 (where the fp32 GEMMs cost most, by estimate about 2 ms).
timeout 100 python3 experiments/ab_layer.py --router --backward --rounds 3 --env-a MOK_ROUTER_BACKWARD=torch --env-b MOK_ROUTER_BACKWARD=kernel anchor-2 > $K/ab_router_backward_bf16.log 2>&1; echo ab-bf16 rc=$?; grep -v Warn $K/ab_router_backward_bf16.log
