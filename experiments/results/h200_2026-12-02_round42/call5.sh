# Round 42, call 5: B multicast in the bare mainloop again, each mode held for seconds at the power limit. Round 13's
# sustained runs (mainloop_gap.py) found 2-CTA B multicast 6-9% faster than TMA boxes through 7-10% more clock at the
# same power; round 38's short interleaved runs (7 runs of 160 tiles per mode) did not, and dropped the cluster plan.
# Round 41 found the anchors' time set by their joules at the power limit, which only sustained runs show. Each mode
# runs 4 s with the clock and power sampled, twice in turn, at K = 7168 (anchor-5's gate/up) and 4096 (anchor-3's);
# box@mcastB-grid is box on the cluster grid's CTA count (what the clusters' grid costs alone).
export MOK_GIT_COMMIT=b3220d4+gap
source experiments/device_call.sh
mkdir -p build $OUT/results
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -o build/mainloop_roofline_probe \
  experiments/mainloop_roofline_probe.cu; el probe_build $?
build/mainloop_roofline_probe 16 box 3 7168 | grep -E "CTAs|^box" | head -3
for k in 7168 4096; do
  python3 experiments/mainloop_gap.py --probe-only --seconds 4 --k $k --name mainloop_gap_round42_k$k \
    --modes box mcastB box@mcastB-grid box mcastB box@mcastB-grid > $K/gap_k$k.log 2>&1; el "gap k=$k" $?
  grep -E "^probe" $K/gap_k$k.log
done
cp $OUT/results/mainloop_gap_round42_* $K/ 2>/dev/null; tar czf $OUT/call5.tgz -C $OUT k
