# Round 29, call 1 (nvidia-h200): the whole GPU suite at c6fbbe6 (round 28's review mend, the wgrad kernels' row
# order in one helper, `_step_row`, was not run on a GPU in round 28).
cp -r .carry/clean/. .
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}; K=$OUT/k; mkdir -p $K
MOK_STAGES=tests MOK_TIMEOUT_TESTS=280 MOK_DEADLINE_S=290 bash experiments/gpu_run.sh > $K/suite.log 2>&1; echo suite rc=$?; grep -E "passed|failed|FAILED|ERROR" $K/suite.log | tail -8
