# Round 29, call 5 (nvidia-h200): the whole GPU suite at the pull order's final rule (74bda23), then the layer bench,
# forward and backward, router inside, at the anchors where the pull by token is the default (1-3, 5) and the qwen
# slice (top-1: by row, unchanged).
cp -r .carry/clean/. .
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}; K=$OUT/k; mkdir -p $K
MOK_STAGES=tests MOK_TIMEOUT_TESTS=270 MOK_DEADLINE_S=280 bash experiments/gpu_run.sh > $K/suite.log 2>&1; echo suite rc=$?; grep -E "passed|failed|FAILED|ERROR" $K/suite.log | tail -8
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/suite.tgz
MOK_STAGES=bench MOK_BENCH_SHAPES=anchor-1,anchor-2,anchor-3,anchor-5,qwen3.5-397b/ep64 MOK_BENCH_ARGS="--backends torch,triton,cuda --passes fwd,bwd --interleave" MOK_DEADLINE_S=200 bash experiments/gpu_run.sh > $K/bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/bench.log | grep "bf16\|timeout\|geomean"
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench.tgz
