# Round 32, call 6 (nvidia-h200, the machine of calls 4-5 still warm): a second forward reading of the anchors and
# the EP-64 slices, torch / cuda, router inside, balanced order (bench_20261201-071611).
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_TIMEOUT_BENCH=300 MOK_DEADLINE_S=320 \
  MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh
