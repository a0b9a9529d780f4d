# Round 20, call 2: branch down-tma-wg-local (round 19's patches/down_tma_wg_local.patch on main c077be1): the CUDA
# GPU tests, racecheck + memcheck of sanitize_check, A/B down_tma off vs on in ring (anchors 3-5) and gather (1-2).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=c077be1+down_tma_wg_local
K=$OUT/k; mkdir -p $K
git apply experiments/results/h200_2026-11-30_round19/patches/down_tma_wg_local.patch && echo applied
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_trace_gpu.py > $K/tests.log 2>&1; echo tests rc=$?; tail -3 $K/tests.log
timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 200 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_tma=false --launch-b down_tma=true anchor-3 anchor-4 anchor-5 anchor-2 anchor-1 > $K/ab_down_tma.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_down_tma.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
