# For the next GPU session (round 39). None of this has run.
#
# Call A (about 2 minutes): the ping-pong down task by row halves (pingpong_row_halves.patch, on 66e5e30 and later):
# each consumer warpgroup multiplies 64 rows x 256 columns per turn (m64n256k16, as consume_tile) instead of 128 rows
# x 128 columns (two m64n128k16 per k16 step), so a block reads 320 instead of 384 KB of wgmma operands from shared
# memory. Round 38 (calls 3, 9) ruled out the epilogue and B's fetch as what holds anchor-2's down blocks at 4.25 us
# (about 2.3 us of tensor work); the shared memory's 128 B per cycle is the next suspect (by arithmetic only; call C
# measures it). Gather-mode shapes only
# (the ping-pong runs there):
#   source experiments/device_call.sh; R=experiments/results/h200_2026-12-01_round38
#   AB_ROUNDS=12 ab pp_rows 200 --patch $R/pingpong_row_halves.patch anchor-2 anchor-1
# Adopt at B/A <= 0.99 with every output bitwise equal, then the GPU suite (MOK_STAGES=tests, about 6 minutes) and
# the docs of run_down_task / consume_column_half (which the patch leaves in place, unused).
#
# Call B: the anchors beside SonicMoE at HEAD (round 37's call 7; the anchors' kernels did not change in round 38):
#   mv experiments/results /tmp/results_stash   # the tracked tree and the SonicMoE bundle exceed a call's 64 MiB
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
#     MOK_TIMEOUT_BENCH=400 MOK_DEADLINE_S=440 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
#     bash experiments/gpu_run.sh      # carry [".carry/sonic", ".carry/quack_cache.tgz"]; restore the folder after
#
# Call C: Nsight Compute's MemoryWorkloadAnalysis on anchor-2's gather kernel (gpu_run.sh ncu stage with
# MOK_NCU_SHAPE=anchor-2) to read the shared-memory pipe's utilisation directly, whatever call A shows.
#
# Call D (about 1 minute): why the qwen slice's forward moves most from run to run (round 38: 524.6 and 562.1 TFLOP/s
# in two runs minutes apart; the kernel's span is about 0.80 ms of a 0.92-0.98 ms layer). Is a series of bench calls
# host-bound there (the GPU idle between the router, top-k, schedule kernels and the megakernel)?
#   python3 experiments/profile_forward.py qwen3.5-397b/ep64 kimi-k2.7/ep64 --backends cuda --sync-debug
