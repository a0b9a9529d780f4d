# Round 35, call 2 (nvidia-h200, .carry/sonic carried, experiments/results/ moved out of the tree for the 64 MiB):
# SonicMoE beside the new defaults at anchor-2, its GEMMs compiled from nothing (quack_cache.tgz came back).
MOK_GIT_COMMIT=1283c16 MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2 MOK_BENCH_SHAPES=anchor-2 MOK_TIMEOUT_BENCH=540 \
  MOK_DEADLINE_S=575 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh
