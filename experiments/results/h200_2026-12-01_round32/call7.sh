# Round 32, call 7 (nvidia-h200): the whole GPU suite at 525304f.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=tests MOK_TIMEOUT_TESTS=330 MOK_DEADLINE_S=345 bash experiments/gpu_run.sh
