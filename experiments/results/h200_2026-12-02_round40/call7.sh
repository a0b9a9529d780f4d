# Round 40, call 7: the adoption the other way round at the slices: A = 7b0e1d8 (packed rounding), B = the two-F2F
# rounding of abd5b2d (unpacked_rounding_reverse.patch, `git diff 7b0e1d8 abd5b2d -- mok/cuda/include`), to tell
# call 6's lower slice numbers (against round 39's) from a regression.
export MOK_GIT_COMMIT=7b0e1d8
source experiments/device_call.sh
AB_ROUNDS=10 ab unpacked 280 --patch experiments/results/h200_2026-12-02_round40/unpacked_rounding_reverse.patch \
  kimi-k2.7/ep64 glm-5.2/ep64 qwen3.5-397b/ep64 deepseek-v4-pro/ep64
cp $K/ab_unpacked.log $OUT/
