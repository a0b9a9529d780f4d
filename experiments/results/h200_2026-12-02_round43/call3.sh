# Round 43, call 3: anchor-5's task timeline without and with clusters (call 2 stopped there: the padding tickets left
# gaps the timeline's loader refused), then one forward's L2 and DRAM bytes in clusters at anchor-5 under Nsight Compute
# (round 42, call 1: 100.2 GB of L2 in the GEMMs without clusters; the gate/up weights' 30.1 GB would halve).
export MOK_GIT_COMMIT=d60f507
SHOW="^\| \*\*all|^\| anchor|sm90_moe|=== |^stage"
MOK_STAGES=timeline MOK_TIMELINE_ARGS="--dispatch ring" MOK_TIMELINE_SHAPES="anchor-5" MOK_TIMEOUT_TIMELINE=150 \
  MOK_DEADLINE_S=170 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -14
PYTHONPATH=. timeout 150 python3 experiments/task_timeline.py --dispatch ring --clusters anchor-5 2>&1 | tail -12
tar czf $OUT/timeline.tgz -C $OUT results && rm -rf $OUT/results
MOK_CUDA_CLUSTERS=1 MOK_TRAFFIC_TAG=_clusters MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-5" MOK_TRAFFIC_BACKENDS="cuda" \
  MOK_TIMEOUT_TRAFFIC=240 MOK_DEADLINE_S=260 bash experiments/gpu_run.sh 2>&1 | grep -E "$SHOW"
