# Round 40, call 6: the EP-64 slices, torch / cuda in rotation, forward, router inside, twice (round 39's call 8).
export MOK_GIT_COMMIT=7b0e1d8
for i in 1 2; do
  MOK_STAGES=bench MOK_BENCH_SHAPES=kimi-k2.7/ep64,glm-5.2/ep64,qwen3.5-397b/ep64,deepseek-v4-pro/ep64 MOK_TIMEOUT_BENCH=120 \
    MOK_DEADLINE_S=140 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh 2>&1 \
    | grep -E "ep64|stage|geomean|wrote.*gpu_out.*md" | cut -c1-200
  mkdir -p $OUT/run$i; cp build/gpu_out/results/*.md build/gpu_out/results/*.json $OUT/run$i/ 2>/dev/null
done
