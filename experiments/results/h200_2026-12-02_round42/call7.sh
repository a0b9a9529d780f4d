# Round 42, call 7: the other half of round 38's cluster plan, held at the power limit as calls 5-6 held B multicast.
# cpasync-pairA (a 2-CTA pair on one row set and two column blocks: each CTA cp.async-copies half of each K block's
# gathered rows and a bulk copy gives its half to the peer) against cpasync on the same cluster grid and plain cpasync,
# 3 s each, twice in turn, at K = 4096 (anchor-2's gate/up). Round 38's short interleaved runs: 0.89x.
export MOK_GIT_COMMIT=5bd43f6
source experiments/device_call.sh
mkdir -p build $OUT/results
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -o build/mainloop_roofline_probe \
  experiments/mainloop_roofline_probe.cu; el probe_build $?
python3 experiments/mainloop_gap.py --probe-only --seconds 3 --k 4096 --name mainloop_gap_round42_pairA \
  --modes cpasync cpasync@mcastB-grid cpasync-pairA cpasync cpasync@mcastB-grid cpasync-pairA > $K/gap_pairA.log 2>&1
el "gap pairA" $?; grep -E "^probe" $K/gap_pairA.log
cp $OUT/results/mainloop_gap_round42_pairA.json $OUT/results/mainloop_gap_round42_pairA.md $K/; rm -rf $OUT/results
tar czf $OUT/call7.tgz -C $OUT k
