# Round 36, call 5 (nvidia-h200; .carry/sonic and .carry/quack_cache.tgz carried, experiments/results moved out of the
# tree while it ran): the bench at anchors 2-5, torch / SonicMoE / cuda in rotation, forward, router inside, on
# f1644e4 (gate/up bands of 4 tiles, four_wave default policy). Ran as one inline command (this folder was moved out).
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
  MOK_TIMEOUT_BENCH=500 MOK_DEADLINE_S=560 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^anchor|stage|summary|geomean|Error|error" | cut -c1-220
