# For the next GPU session (round 42). None of this has run.
#
# Round 41 closed the epilogue-hold leads (the stores' cost is their bytes, not their latency) and found the anchors
# held at the power limit at 0.951 / 0.936-0.944 / 0.976 / 0.999x SonicMoE's speed, with 1.05 / 1.06 / 1.03 / 1.00x
# its joules per forward. At anchors 3-5 a faster layer is one that needs fewer joules: fewer bytes through DRAM and
# L2. Round 35 measured those bytes before rounds 36-40 changed the minibatch size, the gate/up order and the
# dispatch; call A measures them again at the shapes where energy decides, beside SonicMoE, so the next candidate is
# chosen by bytes (carry [".carry/sonic", ".carry/quack_cache.tgz"], experiments/results moved out of the tree, the
# script run from a copy at experiments/_callN.sh):
#   MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-3 anchor-5" MOK_TRAFFIC_BACKENDS="cuda sonicmoe" \
#     MOK_TIMEOUT_TRAFFIC=420 MOK_DEADLINE_S=470 bash experiments/gpu_run.sh
# Read: DRAM read / write and L2 bytes per forward of the megakernel against SonicMoE's two GEMMs, and which of the
# megakernel's streams (the ring's copy of x, the weights' re-reads, y and h) make the difference.
#
# Call B, the candidate that call A points at, timed as an energy A/B rather than a short one. A candidate behind a
# MOK_* switch runs as two backend entries of one process (energy_per_layer.py's `cuda+MOK_NAME=VALUE`, written after
# round 41's device time: CPU-tested, never run on the GPU), e.g.
#   MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 --seconds 8 --repeats 3" \
#     MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_DISPATCH=gather,sonicmoe" bash experiments/gpu_run.sh
# (round 41's call 3 ran that comparison as two processes: ring 4.59 J, gather 4.83 J per forward; the one-process
# form should agree). A kernel patch: `ab_kernels.py --patch P --rounds 10 --clock-log $K/clock.csv` (its clock log
# shows whether the two builds ran at the same clock), then energy_per_layer.py with the patch applied.
#
# After any kernel change: the GPU suite in two calls (tests, then compute-sanitizer):
#   MOK_STAGES=tests MOK_TIMEOUT_TESTS=570 MOK_DEADLINE_S=590 bash experiments/gpu_run.sh
#   MOK_STAGES=sanitize MOK_TIMEOUT_SANITIZE=300 bash experiments/gpu_run.sh
