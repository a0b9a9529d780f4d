# Round 21, call 10 (main at c13f6a6): patches/modes_and_fence.patch = the pipelined kernel compiled per dispatch mode
# (DispatchModes: ring kernels without the gather code, gather kernels without the ring producer's) and the
# per-thread proxy fence after bf16 gate/up tasks dropped (h leaves by TMA). A/B against main, then the patch
# applied: the CUDA GPU tests, racecheck (gather, pipelined) and memcheck; last, the fence alone (fence_only.patch).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=experiments/results/h200_2026-11-30_round21/patches
K=$OUT/k; mkdir -p $K
export MOK_GIT_COMMIT=c13f6a6+modes_and_fence
timeout 150 python3 experiments/ab_kernels.py --rounds 8 --patch $P/modes_and_fence.patch anchor-5 anchor-3 kimi-k2.7/ep64 glm-5.2/ep64 anchor-2 anchor-1 > $K/ab_modes.log 2>&1; echo ab-modes rc=$?; grep -E 'B/A|Error|skipped' $K/ab_modes.log
cp -r experiments/results/h200_2026-11-30_round21/patches /tmp/patches_copy
git apply $P/modes_and_fence.patch && echo applied || exit 1
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_trace_gpu.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
git apply -R $P/modes_and_fence.patch && MOK_GIT_COMMIT=c13f6a6+fence timeout 80 python3 experiments/ab_kernels.py --rounds 6 --patch /tmp/patches_copy/fence_only.patch anchor-2 anchor-1 kimi-k2.7/ep64 > $K/ab_fence.log 2>&1; echo ab-fence rc=$?; grep -E 'B/A|Error|skipped' $K/ab_fence.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
