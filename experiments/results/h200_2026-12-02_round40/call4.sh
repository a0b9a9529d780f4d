# Round 40, call 4 (carrying .carry/sonic and .carry/quack_cache.tgz; run from a copy at experiments/_call4.sh): round
# 39's next_call B, the anchors beside SonicMoE at 7b0e1d8 (the packed SwiGLU rounding in), forward only, backends
# interleaved. experiments/results is moved out for this call (the tree and the SonicMoE bundle would pass a call's 64
# MiB).
export MOK_GIT_COMMIT=7b0e1d8
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
  MOK_TIMEOUT_BENCH=420 MOK_DEADLINE_S=470 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh 2>&1 | tail -30
