# For the next GPU session (round 38). None of this has run.
#
# The lead from round 37 is structural: 2-CTA clusters whose two CTAs take row tiles of one expert's column block and
# share B by TMA multicast (SonicMoE's GEMMs all run so). It needs the scheduler to hand out pairs, cluster launch,
# and the empty barriers to count the peer's consumers; write it on the CPU machine first (the task-order simulator
# in tests/test_cuda_compile.py can check a pair decode), then A/B it here against HEAD at all nine shapes.
#
# Before that, two cheap readings that round 37 did not take:
# Call A: the same source counters at anchor-3 (ring mode, where the gap to SonicMoE is 0.87-0.93x): which waits hold
# the consumers there (dispatch tasks, the ring's dependencies, the down tasks' loads)?
#   MOK_STAGES=ncusrc MOK_NCU_SHAPE=anchor-3 bash experiments/gpu_run.sh
#   then here: python3 experiments/ncu_source_lines.py <its CSV> --section 0 --reasons
# Call B: round 36's call C, the training step (forward and backward, router inside) at anchors 3 and 5 with the
# four-wave default, torch / triton / cuda:
#   MOK_STAGES=bench MOK_BENCH_SHAPES=anchor-3,anchor-5 MOK_BENCH_ARGS="--backends torch,triton,cuda --passes fwd,bwd \
#     --interleave" bash experiments/gpu_run.sh
