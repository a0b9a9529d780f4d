# Round 29, call 8 (nvidia-h200-x2): what the pull by token is worth across two GPUs, as an A/B in one run
# (experiments/ab_dist_layer.py: both settings alternating in the same processes; call 6's two runs differed by more).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 330 python3 -m torch.distributed.run --standalone --nproc-per-node 2 experiments/ab_dist_layer.py --env-a MOK_PULL_ORDER=row --env-b MOK_PULL_ORDER=token --models kimi-k2.7,glm-5.2,qwen3.5-397b,deepseek-v4-pro --backends triton,cuda --rounds 3 --calls 3 > $K/ab_dist.log 2>&1; echo rc=$?; grep -E "GPUs;|B/A|Error|error" $K/ab_dist.log | head -20
