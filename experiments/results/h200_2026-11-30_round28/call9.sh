# Round 28, call 9 (nvidia-h200, the budget's last minutes): next_call.sh's call A at anchor-2 only, cuda only: where
# the anchor-2 backward's time goes after round 28 (round 27's call 5: 21.2 ms of kernels, pulls 3.96, dx 6.56).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 experiments/profile_backward.py anchor-2 --router --backends cuda > $K/profile_anchor-2.log 2>&1; echo rc=$?; grep -A14 "backward wall" $K/profile_anchor-2.log | grep -v "^---" | cut -c1-60,130-175 | head -16
