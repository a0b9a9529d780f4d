# Round 39, call 1: round 38's next_call A and D.
# A: the ping-pong down task by row halves (round 38's pingpong_row_halves.patch): each consumer warpgroup issues
#    m64n256k16 over its 64 rows instead of two m64n128k16 over 128 rows x its 128 columns, so the block reads 320
#    instead of 384 KB of wgmma operands from shared memory. Gather-mode anchors only (the ping-pong runs there).
# D: is the qwen slice's forward host-bound between its kernels (round 38: 524.6 and 562.1 TFLOP/s minutes apart)?
export MOK_GIT_COMMIT=2fc9f46
source experiments/device_call.sh
R38=experiments/results/h200_2026-12-01_round38
build_jit
AB_ROUNDS=12 ab pp_rows 200 --patch $R38/pingpong_row_halves.patch anchor-2 anchor-1
timeout 150 python3 experiments/profile_forward.py qwen3.5-397b/ep64 kimi-k2.7/ep64 --backends cuda --sync-debug \
  --json $K/profile_forward.json > $K/profile_forward.log 2>&1; el profile_forward $?
grep -E "TFLOP|busy|idle|gap|sync" $K/profile_forward.log | head -40
tar czf $OUT/call1.tgz -C $OUT k
