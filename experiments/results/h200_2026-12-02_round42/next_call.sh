# For the next GPU session (round 43). None of this has run.
#
# Round 42 accounted for the megakernel's extra L2 bytes (mostly the weights read twice as often without multicast) and
# found B multicast in the bare mainloop 5.5-6.5% faster than TMA boxes at the gate/up GEMM's K when each mode is held
# at the power limit (calls 5-6; round 38's short interleaved runs had hidden it). The lead is a cluster form of the
# megakernel's gate/up tasks, written on the CPU first (not started):
#   - a pair ticket: two row tiles of one column block in one band (bands of 4 row tiles give two pairs per column
#     block; an expert's odd last row tile runs alone, on the pair's leader, with B loaded whole). With uniform random
#     routing that leaves 3% of the row tiles unpaired at anchors 2-4, 6% at anchor-5 and 1% at the kimi slice
#     (counted on the CPU from sampled routings, 128-row tiles; not a kernel measurement);
#   - each CTA loads half of each K block's B tile with .multicast::cluster to both, and its own A tile; a stage's
#     `empty` barrier counts both CTAs' consumer warps (the remote arrival without .release.cluster: round 13 found the
#     release form 1.8x slower);
#   - the design question: a pair task needs both CTAs at its start, and round 13's draft lost 3-5% per GHz to that
#     lock step. Only the K blocks need to be shared; each CTA's epilogue and signal can stay its own, and the pair's
#     next claim can be made while its last K blocks run, so that the peers come free together.
# Its first measurement is an A/B against this tree held at the power limit, not a short one (short runs hide the
# clock; round 42's lesson): the kernel under the switch the new form would add (say MOK_CUDA_CLUSTERS=1; it does not
# exist yet) beside `cuda` in energy_per_layer.py, e.g.
#   MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 --seconds 8 --repeats 3" \
#     MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_CLUSTERS=1,sonicmoe" bash experiments/gpu_run.sh
# (carry [".carry/sonic", ".carry/quack_cache.tgz"], experiments/results moved out; anchors 4-5 after anchor-3), then
# the GPU suite in two calls:
#   MOK_STAGES=tests MOK_TIMEOUT_TESTS=570 MOK_DEADLINE_S=590 bash experiments/gpu_run.sh
#   MOK_STAGES=sanitize MOK_TIMEOUT_SANITIZE=300 bash experiments/gpu_run.sh
# and the traffic at anchor-5 (gpu_run.sh's traffic stage prints the tile model beside it; with B multicast the
# gate/up B part should halve: forward_traffic.modelled_l2_bytes with GemmTiles(128, 256, cluster_m=2)).
