# Round 39, call 8 (nvidia-h200): the EP-64 slices, torch / cuda in rotation, forward, router inside, at HEAD (the
# kernels as in round 38: this round changed none). Round 38's call 7 again.
export MOK_GIT_COMMIT=89d433b
MOK_STAGES=bench MOK_BENCH_SHAPES=kimi-k2.7/ep64,glm-5.2/ep64,qwen3.5-397b/ep64,deepseek-v4-pro/ep64 MOK_TIMEOUT_BENCH=170 \
  MOK_DEADLINE_S=190 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh 2>&1 \
  | grep -E "ep64|stage|geomean" | cut -c1-200
