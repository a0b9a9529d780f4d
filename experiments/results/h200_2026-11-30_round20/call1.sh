# Round 20, call 1 (main at c077be1, round 19's review mends): the whole GPU suite, memcheck + racecheck of
# sanitize_check, and the first run of experiments/ab_layer.py (down_tma off vs auto, the layer as users call it).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=c077be1
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -3 $K/suite.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 100 python3 experiments/ab_layer.py --env-a MOK_CUDA_DOWN_TMA=0 --env-b MOK_CUDA_DOWN_TMA=auto anchor-2 anchor-1 > $K/ab_layer.log 2>&1; echo ablayer rc=$?; tail -6 $K/ab_layer.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
