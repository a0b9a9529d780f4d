# Round 36, call 8 (nvidia-h200; .carry/sonic and .carry/quack_cache.tgz carried, experiments/results moved out): a
# second reading of anchors 2-5 beside SonicMoE (cuda and SonicMoE in rotation, forward, router inside) on f1644e4.
export MOK_GIT_COMMIT=f1644e4
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
  MOK_TIMEOUT_BENCH=300 MOK_DEADLINE_S=330 MOK_BENCH_ARGS="--backends cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^anchor|stage|geomean|Error|error|packed" | cut -c1-220
