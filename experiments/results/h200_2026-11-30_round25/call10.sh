# Round 25, call 10 (MOK_GIT_COMMIT by hand): what mok.router_logits gives a layer whose router weights are fp32, as
# mok.MoELayer keeps them: the bench's layer with fp32 router weights, MOK_ROUTER=torch (A: F.linear(x.float(), w), the
# module's router before round 25) against the kernel (B), forward and backward at two slices and anchor-1, forward at
# anchor-2; then the 16-column tilings at the glm and deepseek slices (timed at the first tiling only in call 3).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 70 python3 experiments/ab_layer.py --router --router-weights fp32 --backward --rounds 4 --env-a MOK_ROUTER=torch --env-b MOK_ROUTER=kernel kimi-k2.7/ep64 qwen3.5-397b/ep64 anchor-1 > $K/ab_router_fp32_bwd.log 2>&1; echo ab-bwd rc=$?; grep -v Warn $K/ab_router_fp32_bwd.log
timeout 40 python3 experiments/ab_layer.py --router --router-weights fp32 --rounds 4 --env-a MOK_ROUTER=torch --env-b MOK_ROUTER=kernel anchor-2 kimi-k2.7/ep64 > $K/ab_router_fp32_fwd.log 2>&1; echo ab-fwd rc=$?; grep -v Warn $K/ab_router_fp32_fwd.log
timeout 40 python3 experiments/router_logits_bench.py --shapes glm-5.2/ep64 deepseek-v4-pro/ep64 --tilings 64,16,64,4,3 128,16,64,4,4 > $K/router_logits_tilings.log 2>&1; echo tilings rc=$?; grep -v Warn $K/router_logits_tilings.log
