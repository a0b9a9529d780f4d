# For the next GPU session (round 32). SonicMoE calls carry .carry/sonic (54 MB) and .carry/quack_cache.tgz (1.6 MB,
# outside git: SonicMoE's compiled GEMMs for anchors 2-5 forward and anchors 2 and 5 backward), with
# experiments/results/ moved out of the working tree while they run (64 MiB per call). A call returns at most 8 files:
# tar everything else into one.
#
# Call A (nvidia-h200, about 6 minutes): a new baseline in the balanced rotation with the direct backward time, the
# anchors and the EP-64 slices (the slices were last timed with the router inside in round 25), torch / triton / cuda:
#   MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_TIMEOUT_BENCH=520 MOK_DEADLINE_S=540 \
#     MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave" bash experiments/gpu_run.sh
#
# Call B (nvidia-h200, about 8 minutes the first time): SonicMoE's training step at anchor-3 (its backward GEMMs are
# not in the cache yet; keep the returned quack_cache.tgz as .carry/quack_cache.tgz):
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-3 MOK_BENCH_SHAPES=anchor-3 MOK_TIMEOUT_BENCH=520 MOK_DEADLINE_S=540 \
#     MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave --sonic-backward" bash experiments/gpu_run.sh
#
# Leads, by what they would save (mok/cuda/README.md, "Round 31" and "What is left"):
# - anchor-2's backward against SonicMoE's (0.66x direct): the pulls of the token and dO rows (2.56 ms of 18.19, round
#   29) that SonicMoE's GEMMs avoid by gathering rows in their loads; the `cuda` backward's second pull of the token
#   rows (about 1.3 ms at anchor-2; the `triton` backward, which keeps them from its forward, is 1.4 ms faster);
# - the forward at anchors 2-3 (0.84x / 0.89x): the combine tail at I = 256, 2-CTA B multicast at the large shapes.
