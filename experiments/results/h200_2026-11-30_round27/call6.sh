# Round 27, call 6 (nvidia-h200-x2; MOK_GIT_COMMIT by hand): the two-GPU layer bench again after dist_cli's backward
# stopped accumulating into .grad (it now returns the gradients, as the single-GPU bench does): call 4's backward
# timed, from the second call on, a read-add-write of every weight gradient (17 GB per GPU at kimi), for every
# backend alike. Transfers skipped (call 4 has them).
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}; K=$OUT/k; mkdir -p $K
MOK_MBENCH_TAG=uniform_grads_returned MOK_MBENCH_ARGS="--backends nccl,triton,cuda --iters 10 --warmup 3 --skip-transfers" MOK_DEADLINE_S=200 bash experiments/gpu_run.sh mbench > $K/gpu_run.log 2>&1; echo rc=$?; grep -E "^\| |stage" $K/gpu_run.log | tail -16
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/mbench.tgz
