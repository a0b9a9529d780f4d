# For the next GPU call (round 21): the ping-pong down task of branch down-ping-pong, from main at or after cf65f80 (the patch is against 29ec26a).
# Run from the repository root on the device ($OUT set), e.g. `bash experiments/results/h200_2026-11-30_round20/
# patches/run_down_ping_pong.sh` with a 600 s limit. Every step has its own timeout: the turn barriers are named
# barriers, which do not time out by themselves. Round 20's calls suggest about 5 minutes (more on a fresh machine,
# which builds first); the timeouts add up to more than 600 s, so a call's limit may cut the last step.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=experiments/results/h200_2026-11-30_round20/patches
K=$OUT/k; mkdir -p $K
export MOK_GIT_COMMIT="$(git rev-parse --short HEAD 2>/dev/null || echo main)+down_ping_pong"
# 1. What the register split alone costs (main's build against main with 64/216), before the patch is applied.
timeout 120 python3 experiments/ab_kernels.py --rounds 6 --patch $P/regs_64_216.patch anchor-2 anchor-1 anchor-5 > $K/ab_regs.log 2>&1; echo regs rc=$?; grep -E 'B/A|Error' $K/ab_regs.log
# 2. The branch, applied; its own tests first, then the CUDA test files.
git apply $P/down_ping_pong.patch && echo applied || exit 1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs -x tests/test_cuda_gpu.py -k "ping_pong or down_tma" > $K/tests_ping_pong.log 2>&1; echo pp-tests rc=$?; tail -3 $K/tests_ping_pong.log
# 3. One build launched both ways.
timeout 120 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_ping_pong=false --launch-b down_ping_pong=true anchor-2 anchor-1 > $K/ab_ping_pong.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_ping_pong.log
# 4. Where the down task's time went.
timeout 60 python3 experiments/task_timeline.py anchor-2 > $K/timeline.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline 2>/dev/null; head -8 $K/timeline.log
# 5. The rest of the CUDA tests and racecheck, if the time allows (the call's limit ends it otherwise).
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_trace_gpu.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
