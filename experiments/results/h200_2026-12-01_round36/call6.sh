# Round 36, call 6 (nvidia-h200, warm after call 5; experiments/results still moved out): the EP-64 slices, torch / cuda
# in rotation, forward, router inside; then notebooks/overlap_granularity.ipynb in full mode with a fresh sweep (the
# executed notebook, its JSON and plot replaced the committed ones).
export MOK_GIT_COMMIT=f1644e4
MOK_STAGES=bench MOK_BENCH_SHAPES=kimi-k2.7/ep64,glm-5.2/ep64,qwen3.5-397b/ep64,deepseek-v4-pro/ep64 MOK_TIMEOUT_BENCH=150 \
  MOK_DEADLINE_S=170 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh 2>&1 \
  | grep -E "ep64|stage|geomean" | cut -c1-200
mkdir -p $OUT/nb
timeout 300 env PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions \
  TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_NOTEBOOK_MODE=full MOK_NOTEBOOK_REFRESH=1 \
  python3 -m mok.bench.notebook_runner notebooks/overlap_granularity.ipynb --out-dir $OUT/nb --timeout 280 2>&1 | tail -5
cp experiments/results/overlap_granularity.* $OUT/nb/
