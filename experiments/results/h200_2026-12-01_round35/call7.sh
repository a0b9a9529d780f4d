# Round 35, call 7 (nvidia-h200; .carry/sonic and .carry/quack_cache.tgz carried): anchor-5 beside SonicMoE in the
# bench, then both layers' traffic there.
MOK_GIT_COMMIT=1283c16+traffic MOK_STAGES=bench,traffic MOK_SONIC_SHAPES=anchor-5 MOK_BENCH_SHAPES=anchor-5 \
  MOK_BENCH_ARGS="--backends cuda --passes fwd --interleave" MOK_TIMEOUT_BENCH=240 MOK_TRAFFIC_SHAPES=anchor-5 \
  MOK_TRAFFIC_BACKENDS="cuda sonicmoe" MOK_TIMEOUT_TRAFFIC=200 MOK_DEADLINE_S=370 bash experiments/gpu_run.sh
