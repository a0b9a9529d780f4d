# Round 26, call 6 (MOK_GIT_COMMIT by hand): call 5's bench stalled at anchor-2 once SonicMoE's backward was in it
# (nothing printed for 460 s after anchor-1), so here without SonicMoE: the layer bench forward and backward, router
# inside (its backward the kernels since 4f96628), torch and cuda in rotation, at anchor-2, anchor-5 and two slices.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
MOK_STAGES=bench MOK_BENCH_SHAPES=anchor-2,anchor-5,kimi-k2.7/ep64,qwen3.5-397b/ep64 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd,bwd --interleave" MOK_DEADLINE_S=300 bash experiments/gpu_run.sh > $K/bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/bench.log | grep "bf16\|timeout\|geomean"
