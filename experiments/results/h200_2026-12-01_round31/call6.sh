# Round 31, call 6 (nvidia-h200, the committed tree, nothing carried): the whole GPU suite at HEAD (the bench's
# balanced rotation and direct backward time, step_gaps' GPU test, every kernel test), its summary last.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=tests MOK_TIMEOUT_TESTS=300 MOK_DEADLINE_S=320 bash experiments/gpu_run.sh > $OUT/gpu_suite.log 2>&1
echo "suite rc=$?"; grep -E "passed|failed|error" $OUT/gpu_suite.log | tail -5; grep -E "^(FAILED|ERROR)" $OUT/gpu_suite.log | head -20
tail -8 $OUT/gpu_suite.log
