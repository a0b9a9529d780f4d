# Round 44, call 2: why spread dispatch is slower (call 1: 1.3-1.9% more time held at the power limit, through the
# clock at the same work per GHz). anchor-3's task timeline plain, spread, and spread in clusters (round 43's call 3
# has clusters alone); then one forward's DRAM and L2 bytes at anchor-5 plain and spread (Nsight Compute): do the
# copies among the gate/up tasks push the bands' weights out of L2?
export MOK_GIT_COMMIT=2fc9563
MOK_STAGES=timeline MOK_TIMELINE_ARGS="--dispatch ring" MOK_TIMELINE_SHAPES="anchor-3" MOK_TIMEOUT_TIMELINE=120 \
  MOK_DEADLINE_S=140 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -12
PYTHONPATH=. timeout 100 python3 experiments/task_timeline.py --dispatch ring --spread-dispatch anchor-3 2>&1 | tail -10
PYTHONPATH=. timeout 100 python3 experiments/task_timeline.py --dispatch ring --spread-dispatch --clusters anchor-3 2>&1 | tail -10
tar czf $OUT/timeline.tgz -C $OUT results && rm -rf $OUT/results $OUT/gpu_results.tgz
SHOW="^\| \*\*all|^\| anchor|sm90_moe|^stage"
MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-5" MOK_TRAFFIC_BACKENDS="cuda" MOK_TIMEOUT_TRAFFIC=150 MOK_DEADLINE_S=160 \
  bash experiments/gpu_run.sh 2>&1 | grep -E "$SHOW"
mv $OUT/gpu_results.tgz $OUT/traffic_plain.tgz
MOK_CUDA_SPREAD_DISPATCH=1 MOK_TRAFFIC_TAG=_spread MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-5" MOK_TRAFFIC_BACKENDS="cuda" \
  MOK_TIMEOUT_TRAFFIC=150 MOK_DEADLINE_S=160 bash experiments/gpu_run.sh 2>&1 | grep -E "$SHOW"
