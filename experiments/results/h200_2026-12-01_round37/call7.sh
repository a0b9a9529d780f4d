# Round 37, call 7 (nvidia-h200; .carry/sonic and .carry/quack_cache.tgz carried, experiments/results moved out of the
# tree while it ran, so this ran as one inline command): the bench at anchors 2-5, torch / SonicMoE / cuda in rotation,
# forward, router inside, at 2086ab3 (the dispatch change).
export MOK_GIT_COMMIT=2086ab3
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
  MOK_TIMEOUT_BENCH=400 MOK_DEADLINE_S=440 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^anchor|stage|summary|geomean|Error|error|packed" | cut -c1-220
