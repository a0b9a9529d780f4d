# Round 27, call 7 (nvidia-h200-x2; MOK_GIT_COMMIT by hand): why the cuda backward across two GPUs is slower than
# the triton backend's (call 6: 15.2 against 14.5 ms at kimi, 6.9 against 6.5 at qwen): one profiled backward per
# backend at the bench's own layer (experiments/profile_dist_backward.py), kimi and qwen.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
for m in qwen3.5-397b kimi-k2.7; do timeout 110 python3 -m torch.distributed.run --standalone --nproc-per-node 2 experiments/profile_dist_backward.py --model $m > $K/profile_$m.log 2>&1; echo $m rc=$?; grep -v -i warn $K/profile_$m.log | grep -E "backward wall|  ms  | ms " | head -34; done
