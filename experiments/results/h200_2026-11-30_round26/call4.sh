# Round 26, call 4 (MOK_GIT_COMMIT by hand): grad_x at call 3's tilings (16 experts per step; 64 x 128 tiles for bf16
# weights, 128 x 128 for fp32) re-tested and timed with grad_w at ten tilings (each at its own default chunk count),
# then the layer's forward and backward with fp32 router weights, the PyTorch ops (A) against the default (B).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_logits.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 200 python3 experiments/router_logits_bench.py --backward --iters 30 --shapes kimi-k2.7/ep64 qwen3.5-397b/ep64 anchor-5 anchor-1 anchor-2 --json $K/grad_w_tilings.json --weight-tilings 16,128,64,4,3 16,64,128,4,3 16,128,128,4,3 16,64,64,4,4 16,32,128,4,3 64,64,128,4,3 128,64,128,8,3 128,128,64,8,3 64,128,64,4,3 32,64,128,4,3 > $K/grad_w_tilings.log 2>&1; echo bench rc=$?; grep -v Warn $K/grad_w_tilings.log | grep -v "vs torch"
timeout 100 python3 experiments/ab_layer.py --router --router-weights fp32 --backward --rounds 4 --env-a MOK_ROUTER_BACKWARD=torch --env-b MOK_ROUTER_BACKWARD=auto anchor-1 kimi-k2.7/ep64 anchor-2 > $K/ab_fp32.log 2>&1; echo ab-fp32 rc=$?; grep -v Warn $K/ab_fp32.log
