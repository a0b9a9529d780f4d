# Round 27, call 2: after the routing backward kernel became the default on CUDA (0d5facb): the whole GPU suite
# (incl. the new graphed-MoELayer test: make_graphed_callables, new inputs, bitwise), graph_step with a second input
# set written into the captured tensors, and the layer bench forward and backward, router inside, torch and cuda.
# A helper was editing backward host code in the working tree meanwhile: its files are put back to the commit's
# (.carry/clean, made by `git archive`), so this runs the commit.
cp -r .carry/clean/. . && for f in tests/test_host_*.py; do [ -e .carry/clean/$f ] || rm -f $f; done
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
MOK_STAGES=tests MOK_TIMEOUT_TESTS=280 MOK_DEADLINE_S=290 bash experiments/gpu_run.sh > $K/suite.log 2>&1; echo suite rc=$?; grep -E "passed|failed|FAILED|ERROR" $K/suite.log | tail -8
timeout 100 python3 experiments/graph_step.py qwen3.5-397b/ep64 kimi-k2.7/ep64 anchor-1 --backends cuda > $K/graph_step.log 2>&1; echo graph rc=$?; grep -v Warn $K/graph_step.log
MOK_STAGES=bench MOK_BENCH_SHAPES=anchor-1,anchor-2,anchor-5,kimi-k2.7/ep64,qwen3.5-397b/ep64 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd,bwd --interleave" MOK_DEADLINE_S=190 bash experiments/gpu_run.sh > $K/bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/bench.log | grep "bf16\|timeout\|geomean"
