# Round 21, call 7 (main at ef03bef + patches/regs_per_instantiation.patch): the ping-pong down task in its own
# kernel instantiation with 64/216 registers, the other pipelined launches back on 56/224. A/B against main (gather
# shapes: the same instantiation's code, expected equal; ring shapes: the split), then the patch applied: the CUDA
# GPU tests, racecheck of the gather-mode pipelined launches (ping-pong), memcheck.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=experiments/results/h200_2026-11-30_round21/patches
K=$OUT/k; mkdir -p $K
export MOK_GIT_COMMIT=ef03bef+regs_per_instantiation
timeout 230 python3 experiments/ab_kernels.py --rounds 8 --patch $R/regs_per_instantiation.patch anchor-5 anchor-3 anchor-4 kimi-k2.7/ep64 anchor-2 anchor-1 > $K/ab.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error|skipped' $K/ab.log
git apply $R/regs_per_instantiation.patch && echo applied || exit 1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_trace_gpu.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
