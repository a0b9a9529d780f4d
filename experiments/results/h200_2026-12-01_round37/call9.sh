# Round 37, call 9 (nvidia-h200, warm): calls 8 read the slices 1-2% below round 36's bench (kimi 641.5-644.0 against
# 656.2, glm 645.4-646.1 against 659.0) with torch at the same speed. Is it the dispatch change? B = 2086ab3 with
# patches/revert_dispatch.patch (round 36's dispatch), A = 2086ab3, the kernel alone, interleaved.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=2086ab3
timeout 200 python3 experiments/ab_kernels.py --rounds 12 --patch experiments/results/h200_2026-12-01_round37/patches/revert_dispatch.patch \
  kimi-k2.7/ep64 glm-5.2/ep64 anchor-3 2>&1 | grep -E "B/A|Error" | cut -c1-200
echo "+$(( $(date +%s)-T0 ))s"
