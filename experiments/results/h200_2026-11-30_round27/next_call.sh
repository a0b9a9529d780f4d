# For the next GPU session (round 28). Two calls.
#
# Call A (nvidia-h200, about 4 minutes): the weight-gradient kernel's TMA store (TileConfig.tma_store, written after
# round 27's last call: bitwise equal to the pointer stores under the interpreter, compiled to a bulk tensor store
# for sm_90 on the CPU, never run on a GPU). Round 27's call 7 found the wgrad kernel bound by its stores where
# expert parallelism leaves few rows per expert (two GPUs, kimi: 9.0 ms of a 14.5 ms backward, dW written at 1.9
# TB/s). 2048,7168,2048,192,8 is one kimi GPU's load at EP 2 (16,384 rows over 192 experts) on one GPU.
# If a tma_store candidate wins there and does not lose at anchor-5 and qwen, put it in _GPU_BF16 ("wgrad").
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_triton_gpu.py tests/test_triton_run_reuse_gpu.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 240 python3 experiments/tune_triton.py --shapes "2048,7168,2048,192,8;anchor-5;qwen3.5-397b/ep64" --kernels wgrad --budget 150 --no-layer --no-torch --json $K/tune_wgrad.json > $K/tune_wgrad.log 2>&1; echo tune rc=$?; grep -A16 "^wgrad (ms" $K/tune_wgrad.log; grep -A3 "suggested defaults" $K/tune_wgrad.log
#
# Call B (nvidia-h200-x2, about 2 minutes), after adopting the winner (or with it forced):
#   MOK_TRITON_CONFIGS='{"wgrad": {"tma_store": true}}' MOK_MBENCH_TAG=wgrad_tma_store MOK_MBENCH_ARGS="--backends nccl,triton,cuda --iters 10 --warmup 3 --skip-transfers" MOK_DEADLINE_S=200 bash experiments/gpu_run.sh mbench
#   torchrun --nproc-per-node 2 experiments/profile_dist_backward.py --model kimi-k2.7   (wgrad was 9.0 ms)
#
# Call C (nvidia-h200, at most 8 minutes, carrying .carry/sonic: move the large result files out of the tree first,
# see mok/cuda/ROUNDS.md's device notes): where SonicMoE's backward stalls (round 26: nothing printed for 460 s).
# --stacks-every prints every thread's Python stack to stderr every 45 s while the bench runs:
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-5 MOK_BENCH_SHAPES=anchor-5 MOK_TIMEOUT_BENCH=420 MOK_DEADLINE_S=450 \
#     MOK_BENCH_ARGS="--backends torch,cuda --passes fwd,bwd --sonic-backward --stacks-every 45" bash experiments/gpu_run.sh
