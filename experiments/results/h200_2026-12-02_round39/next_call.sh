# For the next GPU session (round 40). None of this has run.
#
# Call A (about 3 minutes): swiglu_packed_rounding.patch (round 39, written after the device time was spent; compiled
# without spills, never run). The SASS of the gate/up epilogue has two F2F.BF16.F32 per element (gate and up rounded
# to bf16 one by one) beside its MUFU.EX2 and MUFU.RCP. The patch rounds the pair with one F2FP (as the staging already
# packs) and unpacks with two integer ops: the same round-to-nearest-even, so the same bits. The MXFP8 path's rounding
# of h goes the same way. F2F.BF16.F32 in each forward kernel instantiation: 318 -> 0 (cuobjdump). If conversions are
# as slow on Hopper as Triton's PR 4563 says, the epilogue's slow-pipe operations per element go from four to three or
# two. First the pieces alone (seconds): experiments/swiglu_epilogue_probe.cu, whose f2f / f2fp / ex2 rows say which
# pipe the conversions use and whose swiglu / swiglu-packed rows say what the patch saves per gate/up tile:
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -o build/swiglu_epilogue_probe \
#     experiments/swiglu_epilogue_probe.cu && build/swiglu_epilogue_probe > $OUT/swiglu_probe.log
#   source experiments/device_call.sh; R=experiments/results/h200_2026-12-02_round39
#   AB_ROUNDS=10 ab packed_rounding 280 --patch $R/swiglu_packed_rounding.patch anchor-2 anchor-1 anchor-3 anchor-5 \
#     kimi-k2.7/ep64 qwen3.5-397b/ep64
# Adopt at B/A <= 0.99 on a shape with every output bitwise equal and none above 1.005, then the GPU suite
# (MOK_STAGES=tests,sanitize MOK_TIMEOUT_TESTS=420 MOK_TIMEOUT_SANITIZE=150 MOK_DEADLINE_S=585). The patch removes
# round_to_bf16, which the probe's f2f row calls: adopting it means giving the probe that one-line F2F rounding itself.
#
# Call B: the anchors beside SonicMoE at HEAD (round 37's call 7; the anchors' kernels did not change in rounds
# 38-39), for a same-day ratio (round 37: 0.91 / 0.87 / 1.02 / 1.06x; round 39's call 9 at anchor-2 in
# profile_forward: 0.934x):
#   mv experiments/results /tmp/results_stash   # the tracked tree and the SonicMoE bundle exceed a call's 64 MiB
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
#     MOK_TIMEOUT_BENCH=400 MOK_DEADLINE_S=440 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
#     bash experiments/gpu_run.sh      # carry [".carry/sonic", ".carry/quack_cache.tgz"]; restore the folder after
#
# Call C: profile_forward.py at anchors 3-5 beside SonicMoE, to split their gaps by GEMM as call 9 did at anchor-2
# (there: the down GEMM at parity, the gate/up GEMM 3.66 against 3.38 ms), with experiments/results moved out as in
# call B and the same carry:
#   MOK_STAGES=fwdprofile MOK_FWDPROFILE_SHAPES="anchor-3 anchor-4 anchor-5" MOK_FWDPROFILE_BACKENDS=cuda,sonicmoe \
#     MOK_TIMEOUT_FWDPROFILE=400 bash experiments/gpu_run.sh
# and the task timelines of the same shapes (task_timeline.py), which split the megakernel's share.
#
# Later: the SwiGLU's MUFU operations (ex2, rcp) split with a polynomial 2^x on the FMA pipe: changes bits, needs an
# accuracy check against the fp64 oracle, and by round 39's arithmetic saves at most about 1% of a gate/up task.
