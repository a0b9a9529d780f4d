# Round 35, call 1 (nvidia-h200): the whole GPU suite on 1283c16 (covers round 34's call12.sh: the review mends' first
# GPU run: the sum kernel's push-count check and lost-row test, the trace with the sum kernel).
MOK_GIT_COMMIT=1283c16 MOK_STAGES=tests MOK_TIMEOUT_TESTS=470 MOK_DEADLINE_S=540 bash experiments/gpu_run.sh
