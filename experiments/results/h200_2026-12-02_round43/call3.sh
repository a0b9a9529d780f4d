# Round 43, call 3: call 2's timeline showed the cluster kernel claiming a whole task early (claim lead 99 us against
# 5-12) and the whole chip running each step's dispatch copies at once (dispatch 47.5 against 42.6 us per task). Now the
# producer asks for its next task by handing its inbox slot back (just in time, 3fce1b8). The
# timeline at anchor-3 without and with clusters, then both held at the power limit (as call 1).
export MOK_GIT_COMMIT=3fce1b8
MOK_STAGES=timeline MOK_TIMELINE_ARGS="--dispatch ring" MOK_TIMELINE_SHAPES="anchor-3" MOK_TIMEOUT_TIMELINE=150 \
  MOK_DEADLINE_S=170 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -24
PYTHONPATH=. timeout 150 python3 experiments/task_timeline.py --dispatch ring --clusters anchor-3 2>&1 | tail -10
tar czf $OUT/timeline.tgz -C $OUT results && rm -rf $OUT/results
MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 anchor-5 --seconds 6 --repeats 2" \
  MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_CLUSTERS=1" MOK_TIMEOUT_ENERGY=200 MOK_DEADLINE_S=220 \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^\| anchor|^stage"
