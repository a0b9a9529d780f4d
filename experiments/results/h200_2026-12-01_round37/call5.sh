# Round 37, call 5 (nvidia-h200): the whole GPU suite with the dispatch change adopted (the rows' sources looked up
# once per task, 16 chunks per lane).
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=tests MOK_TIMEOUT_TESTS=470 MOK_DEADLINE_S=540 bash experiments/gpu_run.sh 2>&1 | tail -25
