# Round 25, call 9 (nvidia-h200-x2; MOK_GIT_COMMIT by hand): the multi-GPU validate at 1 and 2 GPUs with the round's
# defaults (the fused routing, mok.router_logits): correctness and the same bits across GPU counts.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}; K=$OUT/k; mkdir -p $K
bash experiments/gpu_run.sh mvalidate > $K/gpu_run.log 2>&1; echo rc=$?; grep -E "passed|FAIL|bitwise|stage" $K/gpu_run.log | tail -12
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/mvalidate.tgz
