# Round 44, call 1: spread dispatch (MOK_CUDA_SPREAD_DISPATCH) at 2458dea. The megakernel's GPU test files with the new
# bitwise test (spread alone and in clusters against the plain order), then held at the power limit in one process,
# the four ways, at anchors 3-5 (anchor-4 also answers round 43's open check: clusters 0.986x there in two 5 s runs).
export MOK_GIT_COMMIT=2458dea
MOK_STAGES=tests MOK_PYTEST_ARGS="tests/test_cuda_spread_dispatch_gpu.py tests/test_cuda_clusters_gpu.py tests/test_cuda_gpu.py tests/test_cuda_trace_gpu.py tests/test_cuda_mxfp8.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_backward_recompute.py" \
  MOK_TIMEOUT_TESTS=200 MOK_DEADLINE_S=230 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -25
mv $OUT/gpu_results.tgz $OUT/tests.tgz 2>/dev/null
MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 anchor-4 anchor-5 --seconds 5 --repeats 2 --rest 2" \
  MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_SPREAD_DISPATCH=1,cuda+MOK_CUDA_CLUSTERS=1,cuda+MOK_CUDA_CLUSTERS=1+MOK_CUDA_SPREAD_DISPATCH=1" \
  MOK_TIMEOUT_ENERGY=320 MOK_DEADLINE_S=340 bash experiments/gpu_run.sh 2>&1 | grep -E "^\| |^stage|rror"
