# For the next GPU session (round 35).
#
# Call A (nvidia-h200, about 2-3 minutes): call12.sh, the review mend's first GPU run (53372bb and later): the sum
# kernel's push-count check and its GPU test, the trace with the sum kernel, the bad-schedule reports:
#   MOK_GIT_COMMIT=<hash> bash experiments/results/h200_2026-12-01_round34/call12.sh
#
# Call B (nvidia-h200): SonicMoE beside the new defaults needs its bundle and compiled GEMMs. This checkout has
# neither: build the bundle (../shared/tools/sonic_bundle.sh .carry/sonic, 3-4 minutes on the CPU machine, 54 MB, keep
# it out of git), move experiments/results/ out of the tree while the call runs (64 MiB per call), and let the first
# SonicMoE call compile its GEMMs (about 7 minutes for the first shape, 1-2 for each later one: anchor-2 alone first);
# gpu_run.sh returns quack_cache.tgz, to carry as .carry/quack_cache.tgz in the calls after:
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2 MOK_BENCH_SHAPES=anchor-2 MOK_TIMEOUT_BENCH=540 MOK_DEADLINE_S=570 \
#     MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh
#
# Call C: the whole GPU suite on the final tree (399 tests, 370 s in round 34):
#   MOK_STAGES=tests MOK_TIMEOUT_TESTS=430 MOK_DEADLINE_S=460 bash experiments/gpu_run.sh
#
# Leads (mok/cuda/README.md, "What is left"): at the power limit round 34's path spends its saving as energy at
# anchor-3 (3% more work per clock, 3% lower clock): which traffic costs it is not measured (ncu's dram and L2 bytes
# of the two paths); the sum kernel is at the device's copy rate (4.15 TB/s), so the tail is its bytes; anchors 4-5
# energy per FLOP (B multicast in 2-CTA clusters); anchor-2's gate/up mainloop (cp.async gathers); the backward.
