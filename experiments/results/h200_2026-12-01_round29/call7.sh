# Round 29, call 7 (nvidia-h200): call 5's bench read the triton backend's anchor-1 forward 15% slower than round 28
# (191.6 against 226.4 TFLOP/s) while its forward + backward got faster: an A/B in one process of the triton layer
# (router inside), pulling by row against by token, forward alone and forward + backward; then the cuda layer's
# forward + backward at anchor-3 (not in call 4's A/B).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
AB="python3 experiments/ab_layer.py --env-a MOK_PULL_ORDER=row --env-b MOK_PULL_ORDER=token --router --rounds 4 --calls 3"
timeout 120 $AB --backend triton anchor-1 anchor-2 anchor-3 > $K/ab_triton_fwd.log 2>&1; echo fwd rc=$?; grep "B/A" $K/ab_triton_fwd.log
timeout 150 $AB --backend triton --backward anchor-1 anchor-2 anchor-3 > $K/ab_triton_fwd_bwd.log 2>&1; echo fwd+bwd rc=$?; grep "B/A" $K/ab_triton_fwd_bwd.log
timeout 100 $AB --backend cuda --backward anchor-3 > $K/ab_cuda_anchor3.log 2>&1; echo cuda rc=$?; grep "B/A" $K/ab_cuda_anchor3.log
