# Round 28, call 8 (nvidia-h200): call 3's bench read the qwen slice's backward as 1.52 ms for triton against 2.21 ms
# for cuda (bwd = median(fwd+bwd) - median(fwd)). One profiled backward per backend, router inside, to see whether
# the kernels differ or the subtraction does.
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 experiments/profile_backward.py qwen3.5-397b/ep64 --router --backends cuda,triton > $K/profile_qwen.log 2>&1; echo rc=$?; grep -A16 "backward wall" $K/profile_qwen.log | grep -v "^---" | cut -c1-60,130-175 | head -40
