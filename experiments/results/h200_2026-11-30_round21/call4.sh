# Round 21, call 4 (main at 9b88461, ping-pong merged): the whole GPU suite, racecheck and memcheck of sanitize_check,
# then the layer as users call it, ping-pong off vs on (experiments/ab_layer.py).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=$(git rev-parse --short HEAD)
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -3 $K/suite.log
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
timeout 90 python3 experiments/ab_layer.py --env-a MOK_CUDA_DOWN_PING_PONG=0 --env-b MOK_CUDA_DOWN_PING_PONG=1 anchor-2 anchor-1 > $K/ab_layer.log 2>&1; echo ablayer rc=$?; tail -6 $K/ab_layer.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
