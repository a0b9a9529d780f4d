# Round 35, call 3 (nvidia-h200, warm; .carry/sonic and call 2's quack cache as .carry/quack_cache.tgz carried):
# anchors 3-4 beside SonicMoE.
MOK_GIT_COMMIT=1283c16 MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-3,anchor-4 MOK_BENCH_SHAPES=anchor-3,anchor-4 \
  MOK_TIMEOUT_BENCH=550 MOK_DEADLINE_S=580 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh
