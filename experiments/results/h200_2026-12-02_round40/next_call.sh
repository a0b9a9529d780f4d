# For the next GPU session (round 41). None of this has run.
#
# Call A (about 2 minutes): does keeping an epilogue's tile in registers and storing it during the next tile's first
# K blocks hide its cost? mainloop_roofline_probe.cu's box-store (a 64 x 256 bf16 tile per warpgroup staged and stored
# in two 16 KB halves after each mainloop, as the down epilogue's TMA store does) against box-store-deferred (the same
# during the next tile's K blocks 0 and 1, 64 registers of bf16 pairs held beside the accumulators; compiled without
# spills at the kernel's 224 consumer registers, never run). The stand-in epilogue (last argument, ns per tile) plays
# the SwiGLU's arithmetic: about 1,200 ns per gate/up tile since round 40. K: 1024 and 2048 are the down GEMMs of
# anchors 3 and 5, 4096 the gate/up GEMM of anchors 2-4; 160 tiles per CTA reach the power limit. box-store-threads
# (-deferred) are the same with the warpgroup's own 16-byte stores, as the saved gate/up rows of the bench's training
# forward leave.
#   mkdir -p build && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
#     -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu
#   for k in 1024 2048 4096; do for e in 0 1200; do
#     build/mainloop_roofline_probe 16 all 7 $k $e > $OUT/probe_k${k}_e${e}.log; grep -E "^box" $OUT/probe_k${k}_e${e}.log
#   done; done
#   build/mainloop_roofline_probe 160 all 3 2048 0 > $OUT/probe_k2048_e0_160.log; grep -E "^box" $OUT/probe_k2048_e0_160.log
# and the same mainloop with three stages instead of four (the price of 32 KB of staging per warpgroup, which the down
# epilogue would need to be held: What is left):
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -DPROBE_STAGES=3 \
#     -o build/mainloop_roofline_probe3 experiments/mainloop_roofline_probe.cu
#   for k in 1024 2048 4096; do build/mainloop_roofline_probe3 16 box 7 $k 0 | grep -E "^box"; done
# Read: box-store / box is what the epilogue's stores cost a tile; box-store-deferred / box is what is left of it when
# deferred (and the -threads pair the same for stores the threads issue). If the deferred mode recovers most of the difference (at E = 1200 too), write the kernel change as "What
# is left" describes it (mok/cuda/README.md: the gate/up epilogue's "rest", and the down task's epilogue in ring mode;
# the two rules: the signal moves into the next task's mainloop, and never wait for the next task or its first stage
# while an epilogue is held). If it does not, the smem traffic of the staging competes with wgmma's operand reads and
# the lead is dead: say so in What is left.
#
# Call A2 (about 5 minutes, whatever call A says; in the same call if there is room): held_gate_up.patch (this
# folder; written after round 40's device time, compiled without spills or wgmma serialisation, never run). A gate/up
# task whose next task is already queued and is a gate/up task both warpgroups multiply keeps its staged h: the TMA
# stores are issued after the next task's K block 0 is committed and waited for (with the task's signal) after K
# block 2, so the tensor cores multiply meanwhile. The same arithmetic, so every output must be bitwise equal; the
# rules that keep it free of deadlock are in the patch's held_gate_up.cuh. Not with MXFP8 or store warps, which run at
# the EP-64 slices (round 38), so the held path runs at the anchors; the kimi slice is the control (expect 1.00):
#   source experiments/device_call.sh; R40=experiments/results/h200_2026-12-02_round40
#   AB_ROUNDS=10 ab held 300 --patch $R40/held_gate_up.patch anchor-2 anchor-1 anchor-3 anchor-5 kimi-k2.7/ep64
#   AB_ROUNDS=6 ab held_saved 200 --patch $R40/held_gate_up.patch --saved-rows anchor-2 anchor-3
# A hang (the call's timeout) or a bitwise difference is a bug in the patch's rules: read held_gate_up.cuh's two rules
# against what happened before measuring anything else. Adopt at B/A <= 0.99 on a shape, all bitwise equal, none above
# 1.005; then apply it, and the GPU suite and compute-sanitizer racecheck (sanitize_check's H = 320 runs the hook at K
# blocks 0 and 2) in two calls as below.
#
# Call B: anchors 3 and 5 beside SonicMoE sustained at the power limit (round 40: one call's bench ratio moves by
# 5-10% at these shapes, the clock capped in parts of the timed runs). experiments/results moved out and the SonicMoE
# bundle carried, as in round 40's calls 4-5 ([".carry/sonic", ".carry/quack_cache.tgz"]):
#   MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 anchor-5" MOK_ENERGY_BACKENDS=cuda,sonicmoe MOK_TIMEOUT_ENERGY=300 \
#     bash experiments/gpu_run.sh
#
# After any kernel change: the GPU suite in two calls. At 7b0e1d8 the tests alone passed 420 s (round 40's call 2);
# the tests and the sanitizers no longer fit one 10-minute call:
#   MOK_STAGES=tests MOK_TIMEOUT_TESTS=570 MOK_DEADLINE_S=590 bash experiments/gpu_run.sh
#   MOK_STAGES=sanitize MOK_TIMEOUT_SANITIZE=300 bash experiments/gpu_run.sh
# and test_triton_gpu.py::test_fp32_ieee_products_vs_reference_and_ep, which round 40 did not reach (the Triton
# backend's; nothing since touched it), goes first in the tests call if anything Triton changed.
#
# Later: the SwiGLU's reciprocal on the FMA pipe (about 0.4 us per gate/up task, 0.5%; changes bits: What is left).
