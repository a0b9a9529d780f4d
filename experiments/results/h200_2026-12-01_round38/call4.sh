# Round 38, call 4: h_store_warp.patch, the store warps (ring mode at the EP-64 slices, where they run) also take each
# gate/up tile's h rows: the consumers stage and hand the staging over, the store warp issues the two TMA stores and
# waits for their writes (the consumers used to wait, about 4 us of epilogue per gate/up task at kimi). The signal warp
# signals the task after the store warps. A/B at the four slices, 12 rounds, outputs compared bit for bit.
source experiments/device_call.sh
R=experiments/results/h200_2026-12-01_round38
AB_ROUNDS=12 ab h_store_warp 300 --patch $R/h_store_warp.patch kimi-k2.7/ep64 glm-5.2/ep64 qwen3.5-397b/ep64 deepseek-v4-pro/ep64
tar czf $OUT/call4.tgz -C $OUT k
