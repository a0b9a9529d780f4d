# Round 19, call 6 (main at 7da2a43): the layer with and without down_tma in rotation (layer_ab.py), since call 5's
# bench showed anchor-2's layer no faster than round 18 (all shapes 1-3% slower in that run).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=7da2a43
K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-11-30_round19
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 200 python3 $R/layer_ab.py anchor-2 anchor-1 > $K/layer_ab.log 2>&1; echo rc=$?; tail -4 $K/layer_ab.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
