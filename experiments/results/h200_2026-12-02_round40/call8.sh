# Round 40, call 8: the task timelines of anchors 3 and 5 (ring mode, the default there) at 7b0e1d8.
export MOK_GIT_COMMIT=7b0e1d8
source experiments/device_call.sh
mkdir -p experiments/results
for s in anchor-3 anchor-5; do timeout 110 python3 experiments/task_timeline.py $s >> $K/timeline.log 2>&1; el "timeline $s" $?; done
cp experiments/results/task_timeline_* $K/ 2>/dev/null
tail -60 $K/timeline.log | cut -c1-180
tar czf $OUT/call8.tgz -C $OUT k
