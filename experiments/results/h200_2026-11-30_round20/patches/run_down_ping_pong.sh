# For the next GPU call (round 21): the ping-pong down task of branch down-ping-pong. The patch is against main
# 2fcdba4; run from the repository root on the device ($OUT set), e.g. `bash experiments/results/h200_2026-11-30_round20/
# patches/run_down_ping_pong.sh` with a 600 s limit. Every step has its own timeout: the turn barriers are named
# barriers, which do not time out by themselves. Round 20's calls suggest about 5-6 minutes on a warm machine (a
# fresh one builds first); the timeouts add up to more than 600 s, so the call's limit may cut the last step.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=experiments/results/h200_2026-11-30_round20/patches
K=$OUT/k; mkdir -p $K
BASE=$(git rev-parse --short HEAD 2>/dev/null || echo main)
git apply --check $P/down_ping_pong.patch || { echo "the patch does not apply to this tree"; exit 1; }
# 1. What the register split alone costs: main's build against main with 64/216 (before the patch is applied).
MOK_GIT_COMMIT=$BASE+regs timeout 120 python3 experiments/ab_kernels.py --rounds 6 --patch $P/regs_64_216.patch anchor-2 anchor-1 anchor-5 > $K/ab_regs.log 2>&1; echo regs rc=$?; grep -E 'B/A|Error|skipped' $K/ab_regs.log
# 2. The branch, applied; its own bitwise tests first (and down_tma's, whose gather half runs for the first time).
git apply $P/down_ping_pong.patch && echo applied || exit 1
export MOK_GIT_COMMIT=$BASE+down_ping_pong
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs -x tests/test_cuda_gpu.py -k "ping_pong or down_tma" > $K/tests_ping_pong.log 2>&1; echo pp-tests rc=$?; tail -3 $K/tests_ping_pong.log
# 3. racecheck of the four pipelined gather-mode launches of sanitize_check (one of them runs the ping-pong).
timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
# 4. One build launched both ways, bitwise compared.
timeout 120 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_ping_pong=false --launch-b down_ping_pong=true anchor-2 anchor-1 > $K/ab_ping_pong.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error|skipped' $K/ab_ping_pong.log
# 5. Where the down task's time went.
timeout 60 python3 experiments/task_timeline.py anchor-2 > $K/timeline.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline 2>/dev/null; head -8 $K/timeline.log
# 6. The rest of the CUDA tests, if the time allows.
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_trace_gpu.py -k "not ping_pong and not down_tma_equals" > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
