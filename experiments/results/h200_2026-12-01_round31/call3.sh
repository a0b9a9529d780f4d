# Round 31, call 3 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out):
# the bench with the balanced series order (harness.balanced_series_order: every backend after every other equally
# often), SonicMoE side by side: (a) forward at anchors 2-5, torch / SonicMoE / cuda; (b) the training step at
# anchor-5, torch / triton / cuda / SonicMoE (its backward's GEMMs come from the carried quack cache).
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 500 > $K/smi.csv 2>&1 & SMI=$!
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
  MOK_TIMEOUT_BENCH=300 MOK_DEADLINE_S=320 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh > $K/bench_fwd.log 2>&1
echo "fwd rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor|^geomean" $K/bench_fwd.log | cut -c1-150
mv $OUT/gpu_results.tgz $K/bench_fwd.tgz; rm -f $OUT/quack_cache.tgz
left=$(( 575 - ($(date +%s)-T0) ))
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-5 MOK_BENCH_SHAPES=anchor-5 MOK_TIMEOUT_BENCH=$(( left - 20 )) MOK_DEADLINE_S=$left \
  MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave --sonic-backward" \
  bash experiments/gpu_run.sh > $K/bench_step.log 2>&1
echo "step rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor|^geomean" $K/bench_step.log | cut -c1-150
mv $OUT/gpu_results.tgz $K/bench_step.tgz; mv $OUT/quack_cache.tgz $K/ 2>/dev/null
kill $SMI; gzip -f $K/smi.csv; ls -la $K
