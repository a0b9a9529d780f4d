# Round 44, call 3: call 2 found the spread order's copies among the gate/up tasks cost DRAM reads (anchor-5: +1.66 GB,
# L2 +3.0 GB: the bands' weights pushed out of L2). Does an L2 evict-first policy on the dispatch copies' loads and
# stores (dispatch_evict_first.patch) win that back? Interleaved A/B in one process (ab_kernels.py, 30 rounds of 10
# launches, so the GPU sits at its power limit), at anchors 3 and 5: first the spread order against the plain one with
# no patch (calibrates against call 1), then B = patch + spread against A = plain, then the same in clusters.
export MOK_GIT_COMMIT=dc41344
P=experiments/results/h200_2026-12-02_round44/dispatch_evict_first.patch
MOK_STAGES=timeline MOK_TIMELINE_ARGS="--dispatch ring" MOK_TIMELINE_SHAPES="anchor-1" MOK_TIMEOUT_TIMELINE=90 \
  MOK_DEADLINE_S=100 bash experiments/gpu_run.sh 2>&1 | grep -E "^stage|rror"
AB="env PYTHONPATH=. python3 experiments/ab_kernels.py --dispatch ring --rounds 30 --launches 10"
timeout 150 $AB --launch-b spread_dispatch=true anchor-3 anchor-5 2>&1 | grep -vE "^\s*$" | tail -6
timeout 200 $AB --patch $P --launch-b spread_dispatch=true anchor-3 anchor-5 2>&1 | grep -vE "^\s*$" | tail -6
timeout 150 $AB --patch $P --launch-a clusters=true --launch-b clusters=true --launch-b spread_dispatch=true \
  anchor-3 anchor-5 2>&1 | grep -vE "^\s*$" | tail -6
