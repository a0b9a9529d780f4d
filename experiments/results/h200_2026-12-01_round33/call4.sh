# Round 33, call 4 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out):
# the forward at anchors 2-5 beside SonicMoE with the CUDA top-k in the route (tree of call 3), torch / SonicMoE /
# cuda in the balanced order, router inside.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
  MOK_TIMEOUT_BENCH=400 MOK_DEADLINE_S=420 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^anchor|^geomean|stage|quack" | cut -c1-150
