# Round 28, call 6 (nvidia-h200-x2), at the commit with the final wgrad_few_rows entry (128 x 64 blocks, 4 stages;
# the two-tile loop of 7a0ff45): the strip GPU tests on one GPU, then mvalidate (bitwise across GPU counts, the
# two-tile loop new since call 4) and mbench on two GPUs, and the kimi backward's profile.
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
CUDA_VISIBLE_DEVICES=0 timeout 60 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_wgrad_strip.py -m gpu > $K/tests.log 2>&1; echo tests rc=$?; tail -1 $K/tests.log
MOK_DEADLINE_S=250 MOK_MBENCH_TAG=wgrad_few_rows_final MOK_MBENCH_ARGS="--backends nccl,triton,cuda --iters 10 --warmup 3 --skip-transfers" bash experiments/gpu_run.sh mvalidate mbench > $K/gpu_run.log 2>&1; echo rc=$?; grep -E "passed|FAIL|differ|stage|\| (model|kimi|glm|qwen|deepseek)" $K/gpu_run.log | tail -20
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/mbench.tgz
timeout 90 python3 -m torch.distributed.run --standalone --nproc-per-node 2 experiments/profile_dist_backward.py --model kimi-k2.7 --backends cuda > $K/profile_kimi-k2.7.log 2>&1; echo kimi rc=$?; grep -v -i warn $K/profile_kimi-k2.7.log | grep -E "backward wall| ms " | head -12
