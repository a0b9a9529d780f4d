# Round 39, call 4: anchor-2's task timeline in gather mode, whole and with pieces ablated (results garbage where
# ablated): is a down block's ~4.25 us its mainloop's own (stage ring, turns) or what runs beside it? Call 2 found no
# unit busier than 66% in the gather kernel (tensor 64%, shared-memory pipe 62%, L2 66%): latency-bound.
export MOK_GIT_COMMIT=2fc9f46
source experiments/device_call.sh
build_jit
for ab in "" epilogue "dispatch,combine,push" "dispatch,combine,push,epilogue"; do
  timeout 120 python3 experiments/task_timeline.py anchor-2 --dispatch gather ${ab:+--ablate $ab} >> $K/timeline.log 2>&1
  el "timeline gather ${ab:-whole}" $?
done
timeout 120 python3 experiments/task_timeline.py anchor-2 --dispatch ring --ablate dispatch,combine,push,epilogue >> $K/timeline.log 2>&1
el "timeline ring mainloop-only" $?
grep -v Warning $K/timeline.log | cut -c1-200
mkdir -p $K/results && cp experiments/results/task_timeline_anchor-2_* $K/results/ 2>/dev/null
tar czf $OUT/call4.tgz -C $OUT k
