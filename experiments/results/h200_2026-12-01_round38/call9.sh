# Round 38, call 9: what limits anchor-2's down blocks (4.25 us per 128 x 256 block, about 2.3 us of tensor work; the
# epilogues are not it, call 3)? Probe (results garbage): every down block loads the expert's column block 0 of W_down,
# so B comes from L2-hot lines; if the kernel speeds up by much more than the down tasks' B misses could explain, the
# B fetch's latency through the one-block stage ring is the limit.
export MOK_GIT_COMMIT=66e5e30
source experiments/device_call.sh
R=experiments/results/h200_2026-12-01_round38
AB_ROUNDS=8 ab probe_down_b0 150 --patch $R/probe_down_b_block0.patch anchor-2
tar czf $OUT/call9.tgz -C $OUT k
