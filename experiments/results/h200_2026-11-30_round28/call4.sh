# Round 28, call 4 (nvidia-h200-x2), at the commit with the wgrad_few_rows entry (the strip kernel at 128 x 64 blocks,
# call 3's winner): its GPU tests (64- and 128-wide strips bitwise the general kernel) and the Triton GPU tests on
# one GPU; then on two GPUs mvalidate (bitwise across GPU counts), mbench (2,048 tokens per GPU: ~85 rows per expert
# at kimi, where the strip kernel runs) and the profile of the kimi backward (round 27 call 7: wgrad 9.0 of 14.5 ms).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
CUDA_VISIBLE_DEVICES=0 timeout 100 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_wgrad_strip.py tests/test_triton_gpu.py -m gpu > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
MOK_DEADLINE_S=250 MOK_MBENCH_TAG=wgrad_few_rows MOK_MBENCH_ARGS="--backends nccl,triton,cuda --iters 10 --warmup 3 --skip-transfers" bash experiments/gpu_run.sh mvalidate mbench > $K/gpu_run.log 2>&1; echo rc=$?; grep -E "passed|FAIL|bitwise|stage|geomean|\| (nccl|triton|cuda)" $K/gpu_run.log | tail -24
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/mbench.tgz
timeout 100 python3 -m torch.distributed.run --standalone --nproc-per-node 2 experiments/profile_dist_backward.py --model kimi-k2.7 > $K/profile_kimi-k2.7.log 2>&1; echo kimi rc=$?; grep -v -i warn $K/profile_kimi-k2.7.log | grep -E "backward wall|  ms  | ms " | head -34
