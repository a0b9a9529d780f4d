# Round 26, call 7 (MOK_GIT_COMMIT by hand): call 6 read the cuda backward at the qwen slice as 0.73x torch (4.89 ms;
# round 11-12: 2.74 ms, 1.25-1.34x). Where its backward spends the time, routing given (profile_backward.py: wall,
# host return, kernels, host synchronisations, cProfile of the host side), cuda and the Triton backend.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo build rc=$?
timeout 170 python3 experiments/profile_backward.py qwen3.5-397b/ep64 --backends cuda,triton --sync-debug --python > $K/profile_backward_qwen.log 2>&1; echo profile rc=$?; grep -v Warn $K/profile_backward_qwen.log | head -90
