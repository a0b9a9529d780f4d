# Round 39, call 6: two candidates for the down_tma stores (calls 4-5: at anchor-2 a down block takes 4.17-4.23 us
# whole, 3.45 with the stores probe, 3.29 without epilogues: the TMA stores' waits are most of what the ping-pong does
# not hide).
# down_tma_read_wait.patch: with the sum kernel (nothing in the launch reads y) a down task ends with a wait for its
#   stores to leave the staging, not to be written (p.y_read_after_launch); anchors 1-2 (gather, ping-pong) and 3-5
#   (ring, down_tma).
# down_tma_read_wait_box_stores.patch: that, and the ping-pong's stores box by box (8 KB each, the two box buffers
#   taking turns, each box staged while the previous one is read out); anchors 1-2.
export MOK_GIT_COMMIT=2fc9f46
source experiments/device_call.sh
R=experiments/results/h200_2026-12-02_round39
build_jit
AB_ROUNDS=8 ab read_wait 240 --patch $R/down_tma_read_wait.patch anchor-2 anchor-1 anchor-3 anchor-4 anchor-5
AB_ROUNDS=10 ab box_stores 200 --patch $R/down_tma_read_wait_box_stores.patch anchor-2 anchor-1
tar czf $OUT/call6.tgz -C $OUT k
