# Round 19, call 1: round 18's TMA down store (patches/down_tma.patch, applied here on the device): its bitwise
# GPU tests, then the A/B of one build launched with and without it, then the new staging layout against main's
# (both launched without down_tma).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=18bd1f8+down_tma
K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-11-30_round19
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
git apply experiments/results/h200_2026-11-30_round18/patches/down_tma.patch && echo applied
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "down_tma or poison" > $K/tests_down_tma.log 2>&1; echo tests rc=$?; tail -3 $K/tests_down_tma.log
timeout 200 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_tma=false --launch-b down_tma=true anchor-2 anchor-1 anchor-3 anchor-5 > $K/ab_down_tma.log 2>&1; echo ab rc=$?; grep -E 'B/A|bitwise|differ|Error' $K/ab_down_tma.log | head -20
timeout 150 python3 experiments/ab_kernels.py --rounds 8 --patch $R/patches/old_staging_on_down_tma.patch anchor-2 anchor-5 > $K/ab_staging.log 2>&1; echo ab2 rc=$?; grep -E 'B/A|bitwise|differ|Error' $K/ab_staging.log | head -10
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
