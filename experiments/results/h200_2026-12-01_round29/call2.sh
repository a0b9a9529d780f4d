# Round 29, call 2 (nvidia-h200): the pull by token (commit below): its tests on the GPU, the pulls alone in both
# orders at the anchors (EP 1) and at two emulated ranks, then the cuda layer's forward + backward (router inside)
# with MOK_PULL_ORDER=row against token (the cuda backward pulls the token rows and the dO rows).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_pull_by_token.py > $K/pull_tests.log 2>&1; echo tests rc=$?; tail -2 $K/pull_tests.log
timeout 150 python3 experiments/pull_order_bench.py --shapes anchor-1,anchor-2,anchor-3,anchor-5 --json $K/pull_order_ep1.json --md $K/pull_order_ep1.md > $K/pull_order_ep1.log 2>&1; echo bench rc=$?; grep "^|" $K/pull_order_ep1.log | cut -d'|' -f2-12
timeout 80 python3 experiments/pull_order_bench.py --ep 2 --shapes anchor-5,kimi-k2.7 --json $K/pull_order_ep2.json --md $K/pull_order_ep2.md > $K/pull_order_ep2.log 2>&1; echo bench2 rc=$?; grep "^|" $K/pull_order_ep2.log | tail -8 | cut -d'|' -f2-12
timeout 200 python3 experiments/ab_layer.py --env-a MOK_PULL_ORDER=row --env-b MOK_PULL_ORDER=token --router --backward --rounds 4 --calls 3 anchor-2 anchor-5 anchor-1 > $K/ab_layer.log 2>&1; echo ab rc=$?; tail -6 $K/ab_layer.log
