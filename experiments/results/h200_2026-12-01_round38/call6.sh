# Round 38, call 6 (commit 66e5e30, the store warps storing h): the whole GPU suite, then compute-sanitizer memcheck and
# racecheck of the small forward (mok.cuda.sanitize_check: ring mode with the store warps among its paths).
export MOK_GIT_COMMIT=66e5e30
MOK_STAGES=tests,sanitize MOK_TIMEOUT_TESTS=420 MOK_TIMEOUT_SANITIZE=150 MOK_DEADLINE_S=585 bash experiments/gpu_run.sh
