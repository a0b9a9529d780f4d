# Round 21, call 1 (fresh machine): the ping-pong down task (round 20's patches/down_ping_pong.patch) applied to main;
# its bitwise tests, racecheck, then the A/B of one build launched both ways. Every step has its own timeout: the
# turn barriers are named barriers, which do not time out by themselves.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=experiments/results/h200_2026-11-30_round20/patches
K=$OUT/k; mkdir -p $K
BASE=$(git rev-parse --short HEAD 2>/dev/null || echo main)
git apply $P/down_ping_pong.patch && echo applied || exit 1
export MOK_GIT_COMMIT=$BASE+down_ping_pong
timeout 220 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs -x tests/test_cuda_gpu.py -k "ping_pong or down_tma" > $K/tests_ping_pong.log 2>&1; echo pp-tests rc=$?; tail -3 $K/tests_ping_pong.log
timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 150 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_ping_pong=false --launch-b down_ping_pong=true anchor-2 anchor-1 > $K/ab_ping_pong.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error|skipped' $K/ab_ping_pong.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
