# Round 45, call 2 at 479adb0: the spread order's copies now carry an L2 evict-first policy (call 1: 0.986 / 0.998 /
# 0.990x the clusters' time at anchor-3 / anchor-4 / kimi in clusters + spread). (1) the bitwise GPU tests of the
# orders; (2) the plain order against the tree before the change (B = without_copy_policy.patch: is the hinted load
# with the default priority free?); (3) anchors 3-5 held at the power limit, the four ways, in one process.
export MOK_GIT_COMMIT=479adb0
MOK_STAGES=tests MOK_PYTEST_ARGS="tests/test_cuda_spread_dispatch_gpu.py tests/test_cuda_clusters_gpu.py tests/test_cuda_gpu.py" \
  MOK_TIMEOUT_TESTS=170 MOK_DEADLINE_S=190 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -8
mv $OUT/gpu_results.tgz $OUT/tests.tgz 2>/dev/null
mkdir -p $OUT/call2
export TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions
timeout 100 env PYTHONPATH=. python3 experiments/ab_kernels.py --dispatch ring --rounds 30 --launches 10 \
  --patch experiments/results/h200_2026-12-02_round45/without_copy_policy.patch anchor-3 anchor-5 2>&1 \
  | tee $OUT/call2/ab_plain_vs_before.log | grep -E "^A =|^B =|B/A|rror"
MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 anchor-4 anchor-5 --seconds 5 --repeats 2 --rest 2" \
  MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_SPREAD_DISPATCH=1,cuda+MOK_CUDA_CLUSTERS=1,cuda+MOK_CUDA_CLUSTERS=1+MOK_CUDA_SPREAD_DISPATCH=1" \
  MOK_TIMEOUT_ENERGY=300 MOK_DEADLINE_S=310 bash experiments/gpu_run.sh 2>&1 | grep -E "^\| |^stage|rror"
