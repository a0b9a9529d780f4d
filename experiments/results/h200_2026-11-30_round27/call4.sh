# Round 27, call 4 (nvidia-h200-x2; MOK_GIT_COMMIT by hand): the multi-GPU validate at 1 and 2 GPUs after this round's
# changes (host cuts in the Triton pipeline's backward, which the peers-triton transport and the cuda backend run;
# the in-capture workspace), then the two-GPU bench, both under one deadline.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}; K=$OUT/k; mkdir -p $K
MOK_DEADLINE_S=330 bash experiments/gpu_run.sh mvalidate mbench > $K/gpu_run.log 2>&1; echo rc=$?; grep -E "passed|FAIL|bitwise|stage|geomean|\| (nccl|triton|cuda)" $K/gpu_run.log | tail -24
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/mvalidate.tgz
