# For the next GPU session (round 30). Each call runs a commit's files (.carry/clean, as this round's calls).
#
# Call A (nvidia-h200, about 8 minutes, carrying .carry/sonic ONLY: the 54 MB bundle plus the 15 MB tree exceed 64 MiB,
# so first move the largest tracked result files out of the copied tree or carry a trimmed clean copy): SonicMoE side by
# side, forward and backward, at anchors 2-5 (its first-use compilation takes about 400 s; round 25 was the last
# forward comparison: 0.81 / 0.91 / 0.99 / 0.96x; never a backward side by side). Round 28's next_call.sh call B has
# the stack-dumping options for a SonicMoE backward that stalls.
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-5 MOK_TIMEOUT_BENCH=480 \
#     MOK_DEADLINE_S=540 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd,bwd --sonic-backward --stacks-every 45" \
#     bash experiments/gpu_run.sh
#
# Call B (nvidia-h200, about 2 minutes): where the anchor-2 and anchor-5 backwards go per backend after the pull by token
# (round 29's call 9 did anchor-2 for cuda only: 18.19 ms of kernels, pulls 2.56, wgrad 5.82, dx 4.98).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
for s in anchor-2 anchor-5; do timeout 150 python3 experiments/profile_backward.py $s --router --backends cuda,triton > $K/profile_$s.log 2>&1; echo $s rc=$?; grep -A14 "backward wall" $K/profile_$s.log | grep -v "^---" | cut -c1-60,130-175 | head -32; done
#
# Call C (nvidia-h200-x2), after any change to the pulls: mvalidate, then
#   torchrun --standalone --nproc-per-node 2 experiments/ab_dist_layer.py --env-a ... --env-b ... --models kimi-k2.7,qwen3.5-397b
# (an A/B in one run: two bench runs differ by 4-15% on these machines).
