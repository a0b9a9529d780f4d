# For the next GPU session (round 40). None of this has run.
#
# Call A: the anchors beside SonicMoE at HEAD (round 37's call 7; the anchors' kernels did not change in rounds
# 38-39), for a same-day ratio (round 37: 0.91 / 0.87 / 1.02 / 1.06x; round 39's call 9 at anchor-2 in
# profile_forward: 0.934x):
#   mv experiments/results /tmp/results_stash   # the tracked tree and the SonicMoE bundle exceed a call's 64 MiB
#   cp /tmp/results_stash/h200_2026-12-02_round39/next_call.sh experiments/_next.sh   # (a script must travel)
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
#     MOK_TIMEOUT_BENCH=400 MOK_DEADLINE_S=440 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
#     bash experiments/gpu_run.sh      # carry [".carry/sonic", ".carry/quack_cache.tgz"]; restore the folder after
#
# Call B: profile_forward.py at anchors 3-5 beside SonicMoE (call9.sh with the shapes changed), to split their gaps
# by GEMM as call 9 did at anchor-2 (there: the down GEMM at parity, the gate/up GEMM 3.66 against 3.38 ms).
#
# Candidate to write first (round 39, call 9): a cheaper SwiGLU in the gate/up epilogue, the gap at anchor-2. Its two
# MUFU operations per element (ex2, rcp) are about 1.1 us of a 4.9 us epilogue per task (arithmetic). Half the
# elements' 2^x by a polynomial on the FMA pipe (range-reduced, about 2^-22 relative, like ex2.approx) would split the
# load between the two pipes. h would move by a bf16 ulp about as rarely as today's approximations move it against
# the exact formula (swiglu_epilogue.cuh's NOTE). Measure with ab_kernels at anchors 1-2 and the kimi / qwen slices;
# the outputs are then NOT bitwise equal to A's, so check them against the fp64 oracle (tests/test_cuda_*_gpu.py).
