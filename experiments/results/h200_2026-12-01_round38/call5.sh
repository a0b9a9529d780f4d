# Round 38, call 5: call 4 again (kimi 1.040, qwen 0.981 there), 16 rounds, kimi first and last.
source experiments/device_call.sh
R=experiments/results/h200_2026-12-01_round38
AB_ROUNDS=16 ab h_store_warp2 300 --patch $R/h_store_warp.patch kimi-k2.7/ep64 qwen3.5-397b/ep64 glm-5.2/ep64 kimi-k2.7/ep64
tar czf $OUT/call5.tgz -C $OUT k
