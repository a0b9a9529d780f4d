# Round 25, call 1 (bdec926; MOK_GIT_COMMIT by hand): round 24's next_call_route.sh and the whole GPU suite in one call.
# route_bench.py first (the fused routing's GPU time against the PyTorch ops, and the layer with the bench's router
# inside, the two alternating), then every GPU test (the fused route's own, and round 24's widened sort/table tests).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=bdec926
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > $K/gpu.txt
timeout 200 python3 experiments/route_bench.py > $K/route_bench.log 2>&1; echo route-bench rc=$?; grep -v Warn $K/route_bench.log
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -4 $K/suite.log
