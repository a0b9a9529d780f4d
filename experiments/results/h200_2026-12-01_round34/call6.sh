# Round 34, call 6 (nvidia-h200): the new defaults against the old, ab_kernels.py (one build, interleaved, bitwise
# compared). Anchors 1-2 (gather mode, down_tma): A sum_kernel=0 (the combine tasks, round 33's default), B the
# defaults (the sum kernel). Anchors 3-5 (ring mode): A down_tma=0 (the push with store warps, one block per task, the
# combine tasks: round 33's default), B the defaults (down_tma, span 4 at anchor-3 and 2 at anchors 4-5, the sum
# kernel). Then the whole GPU suite.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 80 python3 experiments/ab_kernels.py --launch-a sum_kernel=0 --rounds 8 anchor-2 anchor-1 > $K/ab_gather.log 2>&1
echo "ab gather rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "B/A" $K/ab_gather.log | cut -c1-200
timeout 100 python3 experiments/ab_kernels.py --launch-a down_tma=0 --rounds 8 anchor-3 anchor-4 anchor-5 > $K/ab_ring.log 2>&1
echo "ab ring rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "B/A" $K/ab_ring.log | cut -c1-200
MOK_STAGES=tests MOK_TIMEOUT_TESTS=430 MOK_DEADLINE_S=$(( 575 - ($(date +%s)-T0) )) bash experiments/gpu_run.sh \
  > $K/tests_stage.log 2>&1
echo "tests stage rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "passed|failed|FAILED|ERROR" $K/tests_stage.log | tail -12 | cut -c1-220
tar czf $OUT/call4.tgz -C $OUT k; ls $OUT
