# Round 36, call 4 (nvidia-h200): the whole GPU suite on f1644e4 (gate/up bands of 4 tiles, four_wave default policy).
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=tests MOK_TIMEOUT_TESTS=470 MOK_DEADLINE_S=540 bash experiments/gpu_run.sh 2>&1 | tail -25
