# Round 39, call 5: anchor-2's gather timeline with the "stores" probe (the epilogues stage their rows but issue no
# TMA store, so nothing waits for one to read the staging; results garbage). Call 4: a down block takes 4.23 us whole,
# 3.29 without epilogues; if the probe gives about 3.3, the exposed part is the wait for the TMA stores to read the
# staging (bulk_wait_group_read between the two row halves), which staging box by box could overlap.
export MOK_GIT_COMMIT=2fc9f46
source experiments/device_call.sh
build_jit
for ab in "" stores; do
  for shape in anchor-2 anchor-1; do
    timeout 120 python3 experiments/task_timeline.py $shape --dispatch gather ${ab:+--ablate $ab} >> $K/timeline.log 2>&1
    el "timeline $shape ${ab:-whole}" $?
  done
done
grep -v Warning $K/timeline.log | cut -c1-200
tar czf $OUT/call5.tgz -C $OUT k
