# For the next GPU session (round 25), one call (about 3 minutes warm): mok.route(method="fused"), the router's top-k
# kernel weighing the chosen experts too (written after round 24's last call: its CPU tests pass under the Triton
# interpreter, nothing has run on a GPU). Its GPU tests (the same ids as the PyTorch route, weights within fp32
# rounding, the PyTorch gradient bit for bit, repeatable), then experiments/route_bench.py: the routing's GPU time both
# ways and the layer with the bench's router inside, the two methods alternating, at the slices and anchors 1, 2, 5.
# If the layer gains, make "fused" the default on CUDA (mok/routing.py, MOK_ROUTE) and run the whole GPU suite: tests
# that compare the layer with fixed routing are unaffected, the weights of mok.route change in their last bits.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_topk.py tests/test_route.py > $K/tests_route.log 2>&1; echo tests rc=$?; tail -2 $K/tests_route.log
timeout 300 python3 experiments/route_bench.py > $K/route_bench.log 2>&1; echo route-bench rc=$?; grep -v Warn $K/route_bench.log
