# Round 40, call 3 (run with experiments/results moved out, from a copy at experiments/_call3.sh): what call 2's suite
# did not reach at 7b0e1d8 (its tests stage stopped at test 380 of 404 after 420 s, every test before passing; its
# racecheck at variant 20 of 30): the last three GPU test files, then racecheck alone (call 2's memcheck finished: 0
# errors).
export MOK_GIT_COMMIT=7b0e1d8
MOK_STAGES=tests MOK_TIMEOUT_TESTS=240 MOK_DEADLINE_S=260 \
  MOK_PYTEST_ARGS="tests/test_triton_mxfp8_gpu.py tests/test_triton_run_reuse_gpu.py tests/test_wgrad_strip.py" \
  bash experiments/gpu_run.sh 2>&1 | tail -8
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
T0=$(date +%s)
timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check \
  > $OUT/racecheck.log 2>&1; echo "racecheck rc=$? +$(( $(date +%s)-T0 ))s"
grep -c "variant=" $OUT/racecheck.log; tail -3 $OUT/racecheck.log
