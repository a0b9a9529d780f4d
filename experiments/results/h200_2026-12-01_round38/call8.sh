# Round 38, call 8: h_store_warps_down_tma.patch (on 66e5e30): the store warps take the gate/up tiles' h rows in ring
# mode with down_tma too (anchors 3-5, where the store warps did not run: the down tiles leave by TMA), a flag of its
# own (h_store_warps) beside the down hand-off (store_warps). A/B at anchors 3-5 and the kimi slice (a control: there
# the store warps already took h at 66e5e30), 12 rounds, outputs compared bit for bit.
export MOK_GIT_COMMIT=66e5e30
source experiments/device_call.sh
R=experiments/results/h200_2026-12-01_round38
AB_ROUNDS=12 ab h_down_tma 300 --patch $R/h_store_warps_down_tma.patch anchor-3 anchor-4 anchor-5 kimi-k2.7/ep64
tar czf $OUT/call8.tgz -C $OUT k
