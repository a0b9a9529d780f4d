# Round 31, call 1 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out of
# the tree while it ran). Part C first (where anchor-5's and anchor-2's backward waits), then part A (does SonicMoE in
# the rotation slow cuda's anchor-2 forward?), clocks logged beside part A.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
# --- part C: step_gaps' GPU test, then the step's idle time per pass, then the backward's kernels by operator
timeout 150 python3 -m pytest -q -m gpu tests/test_step_gaps.py > $K/step_gaps_test.log 2>&1; echo "step_gaps test rc=$? +$(( $(date +%s)-T0 ))s"; tail -2 $K/step_gaps_test.log
timeout 150 python3 experiments/step_gaps.py anchor-5 anchor-2 --backends cuda,triton,torch --gaps 8 --json $K/step_gaps.json > $K/step_gaps.log 2>&1
echo "step_gaps rc=$? +$(( $(date +%s)-T0 ))s"; cat $K/step_gaps.log | cut -c1-200 | tail -60
timeout 100 python3 experiments/profile_backward.py anchor-5 --router --backends cuda > $K/profile_backward_a5.log 2>&1
echo "profile rc=$? +$(( $(date +%s)-T0 ))s"; head -40 $K/profile_backward_a5.log | cut -c1-180
# --- part A: bench without / with / without SonicMoE in the rotation, nvidia-smi sampling beside it
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 250 > $K/smi.csv 2>&1 & SMI=$!
for run in 1-without 2-with 3-without; do
  left=$(( 585 - ($(date +%s)-T0) )); [ $left -lt 70 ] && { echo "skip $run: $left s left"; continue; }
  sonic=""; [ "$run" = 2-with ] && sonic=anchor-2,anchor-5
  cap=$(( left - 15 )); [ $cap -gt 150 ] && cap=150
  MOK_STAGES=bench MOK_SONIC_SHAPES=$sonic MOK_BENCH_SHAPES=anchor-2,anchor-5 MOK_TIMEOUT_BENCH=$cap MOK_DEADLINE_S=$(( cap + 20 )) \
    MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh > $K/bench_$run.log 2>&1
  echo "$run: $(date +%T) +$(( $(date +%s)-T0 ))s"; grep -E "^anchor" $K/bench_$run.log | cut -c1-140
  mv $OUT/gpu_results.tgz $K/bench_$run.tgz 2>/dev/null; rm -f $OUT/quack_cache.tgz
done
kill $SMI; gzip -f $K/smi.csv; ls -la $K
