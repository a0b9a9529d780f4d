# Round 21, call 2 (warm): the 64/216 register split alone on main (A/B), then the ping-pong patch applied: anchor-2
# timeline, and the rest of the CUDA GPU tests.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=experiments/results/h200_2026-11-30_round20/patches
K=$OUT/k; mkdir -p $K
BASE=$(git rev-parse --short HEAD 2>/dev/null || echo main)
MOK_GIT_COMMIT=$BASE+regs timeout 150 python3 experiments/ab_kernels.py --rounds 6 --patch $P/regs_64_216.patch anchor-2 anchor-1 anchor-5 > $K/ab_regs.log 2>&1; echo regs rc=$?; grep -E 'B/A|Error|skipped' $K/ab_regs.log
git apply $P/down_ping_pong.patch && echo applied || exit 1
export MOK_GIT_COMMIT=$BASE+down_ping_pong
timeout 60 python3 experiments/task_timeline.py anchor-2 > $K/timeline.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline 2>/dev/null; head -12 $K/timeline.log
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_trace_gpu.py -k "not ping_pong and not down_tma_equals" > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
