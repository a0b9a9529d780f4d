# Round 43, call 1: the first GPU run of the 2-CTA cluster kernel (222db0a). Its GPU tests first (bitwise equal to the
# kernel without clusters, poisoned, EP 1/2/4, 2-4 CTAs, bf16 and MXFP8; every task once in the timeline), then
# anchor-3 and anchor-5 held at the power limit with and without clusters, in one process (no SonicMoE this call).
export MOK_GIT_COMMIT=222db0a
MOK_STAGES=tests,energy MOK_PYTEST_ARGS="-x tests/test_cuda_clusters_gpu.py" MOK_TIMEOUT_TESTS=200 \
  MOK_ENERGY_SHAPES="anchor-3 anchor-5 --seconds 6 --repeats 2" MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_CLUSTERS=1" \
  MOK_TIMEOUT_ENERGY=300 MOK_DEADLINE_S=560 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -60
