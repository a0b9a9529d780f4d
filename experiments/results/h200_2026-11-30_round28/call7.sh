# Round 28, call 7 (nvidia-h200): the whole GPU suite at the final code (39481d3: the wgrad_few_rows entry at 128 x 64
# blocks, 4 stages, with the two-tile loop; call 3's suite ran before them). Many GPU tests run small emulated-EP
# problems with few rows per expert, where the strip kernel now runs.
cp -r .carry/clean/. .
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}; K=$OUT/k; mkdir -p $K
MOK_STAGES=tests MOK_TIMEOUT_TESTS=280 MOK_DEADLINE_S=290 bash experiments/gpu_run.sh > $K/suite.log 2>&1; echo suite rc=$?; grep -E "passed|failed|FAILED|ERROR" $K/suite.log | tail -8
