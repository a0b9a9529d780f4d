# Round 27, call 5 (MOK_GIT_COMMIT by hand): where the time of the backward goes at anchor-5, where the cuda backward
# ties torch's (1.01x in call 2), and at anchor-2: profile_backward with the bench's router inside, cuda and torch.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
for s in anchor-5 anchor-2; do timeout 150 python3 experiments/profile_backward.py $s --router --backends cuda,torch > $K/profile_$s.log 2>&1; echo $s rc=$?; grep -A14 "backward wall" $K/profile_$s.log | grep -v "^---" | cut -c1-60,130-175 | head -32; done
