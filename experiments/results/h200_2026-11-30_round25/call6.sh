# Round 25, call 6 (MOK_GIT_COMMIT by hand): the router tests after call 5's tilings became the defaults and auto
# took cuBLAS's bf16 GEMM with fp32 output for bf16 router weights past 16 experts.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_logits.py tests/test_bench.py > $K/tests.log 2>&1; echo tests rc=$?; tail -4 $K/tests.log
timeout 60 python3 experiments/router_logits_bench.py --shapes kimi-k2.7/ep64 anchor-2 anchor-1 > $K/router_logits_bench.log 2>&1; echo rl-bench rc=$?; grep -v Warn $K/router_logits_bench.log
