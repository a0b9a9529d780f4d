# Round 43, call 2: where the clusters' 2-3% per GHz goes (call 1: +2.4-2.9% clock, -2.7-2.8% TFLOP/s per GHz at
# anchors 3 and 5, held at the power limit). The task timeline at anchors 3 and 5, ring mode, without and with clusters
# (task_timeline.py --clusters): per kind its share, rate, waits for the first K block, and the tail.
# (As run this line read `export MOK_GIT_5390899=COMMIT`, a slip of the sed that filled in the commit, so the
# call's JSON names no commit; the tree was 5390899.)
export MOK_GIT_COMMIT=5390899
MOK_STAGES=timeline MOK_TIMELINE_ARGS="--dispatch ring" MOK_TIMELINE_SHAPES="anchor-3 anchor-5" MOK_TIMEOUT_TIMELINE=200 \
  MOK_DEADLINE_S=260 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -40
PYTHONPATH=. timeout 200 python3 experiments/task_timeline.py --dispatch ring --clusters anchor-3 anchor-5 2>&1 | tail -40
tar czf $OUT/timeline_clusters.tgz -C $OUT results
