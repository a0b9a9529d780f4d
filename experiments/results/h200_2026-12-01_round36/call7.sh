# Round 36, call 7 (nvidia-h200): the down tasks W(s) in the same bands of 4 row tiles as G(s), column-major within
# a band (patches/down_bands4.patch: W2's column blocks read back to back), against f1644e4, ring-mode shapes.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
R36=experiments/results/h200_2026-12-01_round36
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 200 python3 experiments/ab_kernels.py --patch $R36/patches/down_bands4.patch --rounds 8 anchor-5 \
  deepseek-v4-pro/ep64 kimi-k2.7/ep64 glm-5.2/ep64 qwen3.5-397b/ep64 anchor-4 anchor-3 > $K/ab_down_bands4.log 2>&1
echo "ab rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "B/A|skipped|Error" $K/ab_down_bands4.log | cut -c1-200
