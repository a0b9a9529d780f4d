# Round 42, call 2: call 1 found the megakernel reading 1.3x (anchor-3) and 1.3x (anchor-5) SonicMoE's DRAM bytes per
# forward, the weights about 3.3 times at anchor-5. Do L2 eviction hints on the GEMM tiles' TMA loads change that?
# Four patches (createpolicy + the loads' .L2::cache_hint form; the ring-mode loads only), each an A/B against this
# tree, 8 rounds, with the clock sampled: weights evict_last (l2_wlast), token rows / h evict_first (l2_afirst),
# weights evict_first (l2_wfirst), both of the first two (l2_wlast_afirst).
export MOK_GIT_COMMIT=b3220d4
source experiments/device_call.sh
D=experiments/results/h200_2026-12-02_round42
build_jit
for v in l2_wlast_afirst l2_wlast l2_afirst l2_wfirst; do
  AB_ROUNDS=8 ab $v 130 --patch $D/$v.patch --clock-log $K/clock_$v.csv anchor-3 anchor-5 kimi-k2.7/ep64
done
tar czf $OUT/call2.tgz -C $OUT k
