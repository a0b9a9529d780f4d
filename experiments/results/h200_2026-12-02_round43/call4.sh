# Round 43, call 4: the megakernel's GPU tests at 6de89f3 (every file that launches it: the default kernel's
# refactored admission, the timeline's who mark, and the cluster kernel), then compute-sanitizer memcheck and racecheck
# on the forwards in clusters (top-k 2 and 1, bf16 and MXFP8).
export MOK_GIT_COMMIT=6de89f3
MOK_STAGES=tests,sanitize MOK_PYTEST_ARGS="tests/test_cuda_clusters_gpu.py tests/test_cuda_gpu.py tests/test_cuda_trace_gpu.py tests/test_cuda_mxfp8.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_backward_recompute.py" \
  MOK_TIMEOUT_TESTS=380 MOK_SANITIZE_ARGS=--clusters-only MOK_TIMEOUT_SANITIZE=180 MOK_DEADLINE_S=580 \
  bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -40
