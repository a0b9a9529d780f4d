# Round 26, call 8 (MOK_GIT_COMMIT by hand): call 7 found the qwen slice's cuda backward as in round 11 with routing
# given (wall 2.93 ms, 1.98 ms of kernels), so call 6's 4.89 ms comes with the bench's router inside. The same profile
# of the bench's own step (profile_backward.py --router: LayerProblem, its gradients as the bench asks them), cuda
# and torch.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo build rc=$?
timeout 130 python3 experiments/profile_backward.py qwen3.5-397b/ep64 --router --backends cuda,torch --sync-debug --python > $K/profile_step_qwen.log 2>&1; echo profile rc=$?; grep -v Warn $K/profile_step_qwen.log | grep -B2 -A14 "backward wall\|synchronising" | cut -c1-60,120-200 | head -120
