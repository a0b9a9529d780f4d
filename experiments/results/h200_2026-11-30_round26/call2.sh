# Round 26, call 2 (MOK_GIT_COMMIT by hand): the router backward's grad_w cut into token chunks (4f96628) and the
# kernels as the default backward on Hopper. Its GPU tests (a 22-chunk case at anchor-1's shape), the bench with
# grad_x and grad_w timed alone and grad_w at 1-32 chunks, the layer's forward and backward with the PyTorch ops (A)
# against the default (B), then the whole GPU suite at this commit.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_logits.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 120 python3 experiments/router_logits_bench.py --backward --splits 1 2 4 8 16 32 --shapes kimi-k2.7/ep64 qwen3.5-397b/ep64 anchor-1 anchor-2 anchor-5 --json $K/router_backward.json > $K/router_backward.log 2>&1; echo bench rc=$?; grep -v Warn $K/router_backward.log | grep -v "vs torch"
timeout 90 python3 experiments/ab_layer.py --router --router-weights fp32 --backward --rounds 4 --env-a MOK_ROUTER_BACKWARD=torch --env-b MOK_ROUTER_BACKWARD=auto anchor-1 kimi-k2.7/ep64 qwen3.5-397b/ep64 > $K/ab_fp32.log 2>&1; echo ab-fp32 rc=$?; grep -v Warn $K/ab_fp32.log
timeout 80 python3 experiments/ab_layer.py --router --backward --rounds 3 --env-a MOK_ROUTER_BACKWARD=torch --env-b MOK_ROUTER_BACKWARD=auto anchor-1 anchor-2 > $K/ab_bf16.log 2>&1; echo ab-bf16 rc=$?; grep -v Warn $K/ab_bf16.log
timeout 230 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -4 $K/suite.log
