# Round 32, call 5 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out):
# round 31's planned call B: the training step at anchor-3 side by side, torch / triton / cuda / SonicMoE, in the
# balanced order. SonicMoE's four backward GEMMs have no saved choice at this shape yet: quack compiles and times
# their candidates first (about 5.5 minutes), and the cache comes back for the next call.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-3 MOK_BENCH_SHAPES=anchor-3 MOK_TIMEOUT_BENCH=550 MOK_DEADLINE_S=570 \
  MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave --sonic-backward --stacks-every 120" \
  bash experiments/gpu_run.sh > $K/bench_step.log 2>&1
echo "step rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor|^geomean" $K/bench_step.log | cut -c1-150
mv $OUT/gpu_results.tgz $K/bench_step.tgz; mv $OUT/quack_cache.tgz $K/ 2>/dev/null; ls -la $K
