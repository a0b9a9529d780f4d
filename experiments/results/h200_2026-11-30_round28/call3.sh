# Round 28, call 3 (nvidia-h200), at the commit with call 2's winners as defaults (TMA loads in both SwiGLU GEMMs,
# the wgrad's strip kernel for few rows per expert with its TMA store, dx's 128 x 128 blocks up to K = 2048):
# the whole GPU suite, more strip candidates at the kimi EP-2 load, and the layer bench forward and backward with
# the router inside (torch, triton, cuda; as round 27's call 2, plus triton).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
MOK_STAGES=tests MOK_TIMEOUT_TESTS=270 MOK_DEADLINE_S=280 bash experiments/gpu_run.sh > $K/suite.log 2>&1; echo suite rc=$?; grep -E "passed|failed|FAILED|ERROR" $K/suite.log | tail -8
timeout 70 python3 experiments/tune_triton.py --shapes "2048,7168,2048,192,8" --kernels wgrad --budget 40 --no-layer --no-torch --json $K/tune_wgrad.json > $K/tune_wgrad.log 2>&1; echo tune rc=$?; grep -A9 "^wgrad (ms" $K/tune_wgrad.log
MOK_STAGES=bench MOK_BENCH_SHAPES=anchor-1,anchor-2,anchor-5,kimi-k2.7/ep64,qwen3.5-397b/ep64 MOK_BENCH_ARGS="--backends torch,triton,cuda --passes fwd,bwd --interleave" MOK_DEADLINE_S=200 bash experiments/gpu_run.sh > $K/bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/bench.log | grep "bf16\|timeout\|geomean"
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench.tgz
