# Round 29, call 6 (nvidia-h200-x2), 74bda23: two GPUs, where the pull's sources are the other GPU's memory
# (PeerBuffer.remote: by token for top-k > 1 by default). mvalidate (every backend and transport bitwise equal to one
# process), mbench with the default (by token), then mbench's triton and cuda rows again pulling by row.
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
MOK_DEADLINE_S=250 MOK_MBENCH_TAG=pull_by_token MOK_MBENCH_ARGS="--backends nccl,triton,cuda --iters 10 --warmup 3 --skip-transfers" bash experiments/gpu_run.sh mvalidate mbench > $K/gpu_run_token.log 2>&1; echo rc=$?; grep -E "passed|FAIL|differ|stage|\| (model|kimi|glm|qwen|deepseek)" $K/gpu_run_token.log | tail -20
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/mbench_token.tgz
MOK_PULL_ORDER=row MOK_DEADLINE_S=200 MOK_MBENCH_TAG=pull_by_row MOK_MBENCH_ARGS="--backends triton,cuda --iters 10 --warmup 3 --skip-transfers" bash experiments/gpu_run.sh mbench > $K/gpu_run_row.log 2>&1; echo rc=$?; grep -E "FAIL|stage|\| (model|kimi|glm|qwen|deepseek)" $K/gpu_run_row.log | tail -12
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/mbench_row.tgz
