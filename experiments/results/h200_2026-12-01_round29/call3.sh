# Round 29, call 3 (nvidia-h200): the pull by token in two launches (map + fan-out; call 2's version took 6-8 launches
# per pull, which cost most at short pulls: kimi EP 2 0.61-0.65x). Its tests, then the pulls in both orders with the
# by-token tilings swept, at the anchors and at two emulated ranks, then the cuda layer forward + backward A/B.
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 120 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_pull_by_token.py > $K/pull_tests.log 2>&1; echo tests rc=$?; tail -1 $K/pull_tests.log
timeout 200 python3 experiments/pull_order_bench.py --sweep --shapes anchor-1,anchor-2,anchor-3,anchor-5 --json $K/pull_order_ep1.json --md $K/pull_order_ep1.md > $K/pull_order_ep1.log 2>&1; echo bench rc=$?; grep "^|" $K/pull_order_ep1.log | cut -d'|' -f2-12 | grep -v -- "---"
timeout 100 python3 experiments/pull_order_bench.py --sweep --ep 2 --shapes anchor-5,kimi-k2.7 --json $K/pull_order_ep2.json --md $K/pull_order_ep2.md > $K/pull_order_ep2.log 2>&1; echo bench2 rc=$?; grep "^|" $K/pull_order_ep2.log | cut -d'|' -f2-12 | grep -v -- "---"
timeout 150 python3 experiments/ab_layer.py --env-a MOK_PULL_ORDER=row --env-b MOK_PULL_ORDER=token --router --backward --rounds 4 --calls 3 anchor-2 anchor-5 anchor-1 > $K/ab_layer.log 2>&1; echo ab rc=$?; tail -3 $K/ab_layer.log
