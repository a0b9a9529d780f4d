# Round 25, call 5 (1011d72 + the bench script going on past a tiling that does not fit; MOK_GIT_COMMIT by hand):
# call 4's tiling sweep again (it stopped at the first tiling past the shared memory).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 200 python3 experiments/router_logits_bench.py --shapes anchor-2 anchor-3 anchor-1 anchor-5 kimi-k2.7/ep64 qwen3.5-397b/ep64 --json $K/router_logits_tilings.json --tilings 128,128,64,8,3 128,128,64,8,4 128,64,64,4,4 128,256,64,8,3 64,16,128,4,4 128,16,64,4,4 32,16,128,4,4 > $K/router_logits_tilings.log 2>&1; echo tilings rc=$?; grep -v Warn $K/router_logits_tilings.log
