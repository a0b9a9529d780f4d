# Round 37, call 2 (nvidia-h200): call 1's source counters put 23.6% of the gather kernel's warp samples at anchor-2 in
# the consumers' wait for a full stage (7.5% in ring mode): the cp.async gather of A does not keep up. Latency
# candidates: (1) L2 prefetch of the token rows 2 / 4 / 8 K blocks ahead (runtime `gather_prefetch`; measured
# without effect in round 5, never at anchor-2); (2) `patches/gather_l2_256b.patch`: each cp.async asks L2 for 256
# bytes (the row's next K block too) instead of 128. At anchors 2 and 1 (the gather-mode shapes). (3) The task timeline
# at anchor-2 (gather) and anchor-3 (ring) at HEAD. (4) The traffic with round 36's defaults at anchor-5 and anchor-3
# (round 36's next_call.sh, call A).
# The preamble (environment, `el`, `build_jit`, `ab`) is experiments/device_call.sh since round 37's review;
# the commands are the ones that ran.
source experiments/device_call.sh
P=experiments/results/h200_2026-12-01_round37/patches
build_jit
for n in 2 4 8; do ab prefetch$n 60 --launch-b gather_prefetch=$n anchor-2 anchor-1; done
ab l2_256b 90 --patch $P/gather_l2_256b.patch anchor-2 anchor-1
timeout 120 python3 experiments/task_timeline.py anchor-2 anchor-3 > $K/timeline.log 2>&1; el timeline $?
grep -v "^ *$" $K/timeline.log | tail -40 | cut -c1-220
cp experiments/results/task_timeline_anchor-2_* experiments/results/task_timeline_anchor-3_* $K/ 2>/dev/null
MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-5 anchor-3" MOK_TRAFFIC_BACKENDS=cuda MOK_TIMEOUT_TRAFFIC=230 \
  MOK_DEADLINE_S=$(( 560 - ($(date +%s)-T0) )) bash experiments/gpu_run.sh > $K/traffic.log 2>&1; el traffic $?
tail -30 $K/traffic.log | cut -c1-220
cp $OUT/results/traffic_* $K/ 2>/dev/null
tar czf $OUT/call2.tgz -C $OUT k
