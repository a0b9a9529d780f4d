# Round 27, call 3 (ecaed2c): the whole GPU suite after the route test's fix, the in-capture workspace (5ebd082) and
# the helper's host cuts in the cuda backward (ecaed2c); graph_step with steady-state series (steps back to back from
# an idle GPU) at qwen and anchor-1 (whose capture failed in call 2), torch beside; the qwen step's host time.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
MOK_STAGES=tests MOK_TIMEOUT_TESTS=280 MOK_DEADLINE_S=290 bash experiments/gpu_run.sh > $K/suite.log 2>&1; echo suite rc=$?; grep -E "^FAILED|^ERROR| passed| failed" $K/suite.log | tail -8
timeout 120 python3 experiments/graph_step.py qwen3.5-397b/ep64 anchor-1 --backends cuda,torch > $K/graph_step.log 2>&1; echo graph rc=$?; grep -v Warn $K/graph_step.log
timeout 70 python3 experiments/profile_backward.py qwen3.5-397b/ep64 --router --backends cuda > $K/profile_step_qwen.log 2>&1; echo profile rc=$?; grep "backward wall" $K/profile_step_qwen.log
