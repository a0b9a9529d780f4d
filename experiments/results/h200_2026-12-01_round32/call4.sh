# Round 32, call 4 (nvidia-h200): the baseline planned in round 31 (next_call.sh, call A): the anchors and the EP-64
# slices (router inside; the slices last timed so in round 25), forward and backward, torch / triton / cuda in the
# balanced rotation with the direct backward time.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_TIMEOUT_BENCH=530 MOK_DEADLINE_S=550 \
  MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave" bash experiments/gpu_run.sh
