# For the next GPU session (round 29). Three calls; each runs a commit's files (.carry/clean, as this round's calls).
#
# Call A (nvidia-h200, about 2 minutes): the backward's kernels per backend at anchor-2 and anchor-5 after round 28.
# Round 28's call 9 did anchor-2 for cuda only: 19.66 ms of kernels, wgrad 5.98, dx 4.95, pulls 3.97, down dgrad 2.38,
# sums 1.34. The pulls (token rows again for cuda, dO rows for both) are the lead there.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
for s in anchor-2 anchor-5; do timeout 150 python3 experiments/profile_backward.py $s --router --backends cuda,triton > $K/profile_$s.log 2>&1; echo $s rc=$?; grep -A14 "backward wall" $K/profile_$s.log | grep -v "^---" | cut -c1-60,130-175 | head -32; done
#
# Call B (nvidia-h200, at most 8 minutes, carrying .carry/sonic: move the large result files out of the tree first,
# see mok/cuda/ROUNDS.md's device notes): SonicMoE's backward alone at anchor-5 (round 26: nothing printed for 460 s),
# with every thread's Python stack printed every 45 s, so a stall shows where it is:
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-5 MOK_BENCH_SHAPES=anchor-5 MOK_TIMEOUT_BENCH=420 MOK_DEADLINE_S=450 \
#     MOK_BENCH_ARGS="--backends torch,cuda --passes fwd,bwd --sonic-backward --stacks-every 45" bash experiments/gpu_run.sh
# If it runs: the same at anchors 2-4 in a call of its own, for a backward side by side with SonicMoE (the anchors of
# background.md, measured apart: 278 / 445 / 477 / 515 / 466 TFLOP/s; mok's cuda backward in round 28's call 3:
# 294.7 at anchor-1, 314.6 at anchor-2, 467.9 at anchor-5).
#
# Call C (nvidia-h200-x2, about 3 minutes), after any change to the strip kernel (grouped_gemm.py): its GPU tests,
# then two-GPU mvalidate and mbench as round 28's call6.sh.
