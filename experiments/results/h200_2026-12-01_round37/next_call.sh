# For the next GPU session (round 38). None of this has run.
#
# The lead from round 37 is structural: 2-CTA clusters whose two CTAs take row tiles of one expert's column block and
# share B by TMA multicast (SonicMoE's GEMMs all run so). It needs the scheduler to hand out pairs, cluster launch,
# and the empty barriers to count the peer's consumers; write it on the CPU machine first (the task-order simulator
# in tests/test_cuda_compile.py can check a pair decode), then A/B it here against HEAD at all nine shapes.
#
# Call 0 (about 60 s): does sharing the gathered A in a pair pay, in the bare mainloop? experiments/
# mainloop_roofline_probe.cu's cpasync-pairA mode (written in round 37, compiled and spill-free here, never run) against
# cpasync and box on the same cluster grid, at anchor-2's gate/up K:
#   mkdir -p build && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
#     -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu
#   for K in 4096 7168; do build/mainloop_roofline_probe 160 all 7 $K; done
# Read cpasync-pairA against cpasync@mcastB-grid and box@mcastB-grid. If it comes near box, the cluster plan's A side is
# worth writing into the megakernel; if not, drop it before the scheduler work.
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
