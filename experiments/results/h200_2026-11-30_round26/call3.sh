# Round 26, call 3 (MOK_GIT_COMMIT by hand): grad_x's kernel, the larger part of the router backward after call 2
# (fp32 weights: 130 us of 238 at kimi, 1,312 of 1,864 at anchor-2), at eleven tilings: wider column tiles for few
# experts (memory-bound: grad_x's bf16 write), larger tiles for 64-256 experts (bound by the six tensor-core products).
export PYTHONPATH=$PWD TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 300 python3 experiments/router_logits_bench.py --backward --iters 30 --shapes kimi-k2.7/ep64 qwen3.5-397b/ep64 anchor-5 anchor-1 anchor-2 --json $K/grad_x_tilings.json --input-tilings 64,16,128,4,3 128,16,128,4,3 128,16,128,8,3 64,16,256,4,3 128,16,256,8,3 128,64,128,8,3 128,64,64,4,3 64,64,128,4,3 128,32,128,8,4 128,64,128,4,3 256,64,128,8,3 > $K/grad_x_tilings.log 2>&1; echo bench rc=$?; grep -v Warn $K/grad_x_tilings.log | grep "grad_x\|shape\|^[a-z]"
