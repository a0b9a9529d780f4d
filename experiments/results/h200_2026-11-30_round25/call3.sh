# Round 25, call 3 (uncommitted tree on da2f552 + the router logits kernel; MOK_GIT_COMMIT by hand): mok.router_logits
# (mok/triton_ref/router_logits.py: fp32 logits of bf16 x, fp32 router weights as three bf16 terms) on the GPU: its
# tests and the route/bench/layer tests around it, then experiments/router_logits_bench.py (four ways at the bench's
# shapes), then the layer A/B with the router inside: MOK_ROUTER=kernel against MOK_ROUTER=torch is fp32-against-fp32;
# the bench's old bf16 stand-in is the table's "cublas bf16" column.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=da2f552+router
K=$OUT/k; mkdir -p $K
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_logits.py tests/test_route.py tests/test_router_topk.py tests/test_bench.py > $K/tests.log 2>&1; echo tests rc=$?; tail -4 $K/tests.log
timeout 200 python3 experiments/router_logits_bench.py --json $K/router_logits_bench.json > $K/router_logits_bench.log 2>&1; echo rl-bench rc=$?; grep -v Warn $K/router_logits_bench.log
