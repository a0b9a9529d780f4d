# Round 19, call 7 (main at the in-kernel inverse map): the whole GPU suite, the layer A/B (layer_ab.py), the kernel
# A/B at anchors 2 and 1, then memcheck of the pipelined variant's sanitize_check cases.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo inverse-map)
K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-11-30_round19
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -2 $K/suite.log
timeout 40 python3 $R/layer_ab.py anchor-2 anchor-1 > $K/layer_ab.log 2>&1; echo layer rc=$?; tail -2 $K/layer_ab.log
timeout 60 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_tma=false --launch-b down_tma=true anchor-2 anchor-1 > $K/ab_down_tma.log 2>&1; echo ab rc=$?; grep -E 'B/A' $K/ab_down_tma.log
timeout 80 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
