# Round 39, call 7: what do the ping-pong's y stores cost, if not their waits (call 6)? probe_y_generic_stores.patch
# writes each staged half with the warpgroup's own 16-byte stores (two 256-byte row pieces per warp and pass) instead
# of TMA: the same values, so the outputs must stay bitwise equal. Nearer the stores probe's 3.45 us per block (call 5)
# would put the cost on the TMA unit (which B's loads share); no faster, on the SM's L2 writes.
export MOK_GIT_COMMIT=3680dce
source experiments/device_call.sh
R=experiments/results/h200_2026-12-02_round39
build_jit
AB_ROUNDS=10 ab y_generic 200 --patch $R/probe_y_generic_stores.patch anchor-2 anchor-1
timeout 150 python3 experiments/task_timeline.py anchor-2 --dispatch gather --patch $R/probe_y_generic_stores.patch \
  > $K/timeline.log 2>&1; el timeline $?
grep -v Warning $K/timeline.log | cut -c1-200
tar czf $OUT/call7.tgz -C $OUT k
