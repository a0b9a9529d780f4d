# Round 29, call 9 (nvidia-h200, the budget's last minutes): next_call.sh's call B at anchor-2, cuda: where the
# anchor-2 backward's time goes with the pulls by token (round 28's call 9: 19.66 ms of kernels, pulls 3.97).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 experiments/profile_backward.py anchor-2 --router --backends cuda > $K/profile_anchor-2.log 2>&1; echo rc=$?; grep -A16 "backward wall" $K/profile_anchor-2.log | grep -v "^---" | cut -c1-60,130-175 | head -18
