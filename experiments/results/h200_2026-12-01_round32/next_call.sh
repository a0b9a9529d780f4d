# For the next GPU session (round 33). SonicMoE calls carry .carry/sonic (54 MB) and .carry/quack_cache.tgz (1.6 MB,
# outside git: SonicMoE's compiled GEMMs for anchors 2-5 forward and anchors 2, 3 and 5 backward), with
# experiments/results/ moved out of the working tree while they run (64 MiB per call). A call returns at most 8 files.
#
# Call A (nvidia-h200, about 4 minutes, no code): where anchor-3's 0.43 ms of dispatch tasks and anchor-4's stand in
# gather mode now (gather re-reads a tile's rows once per column block; round 13 measured its cp.async copies costing
# the mainloop 18% per GHz at I = 2048, before down_tma, the spans and the ping-pong):
#   python3 experiments/ab_kernels.py --launch-a dispatch=ring --launch-b dispatch=gather --rounds 8 anchor-3 anchor-4
#
# Call B (nvidia-h200, about 5 minutes): energy per forward at anchor-4 and the kimi and qwen slices, cuda / SonicMoE
# (anchor-4 only) / torch, so every target shape has its clock and work per clock (round 32: anchors 2, 3, 5):
#   MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-4 kimi-k2.7/ep64 qwen3.5-397b/ep64" bash experiments/gpu_run.sh
# (MOK_ENERGY_BACKENDS=cuda,sonicmoe,torch unpacks SonicMoE itself; carry .carry/sonic and .carry/quack_cache.tgz)
# (the stage was added after the last call, and the script's settle window after call 10: run it first, small,
#  e.g. MOK_ENERGY_SHAPES=anchor-2 MOK_ENERGY_BACKENDS=cuda,torch, and check every run has samples).
#
# Leads, by what round 32 measured (mok/cuda/README.md, "Round 32" and "What is left"):
# - anchor-2 (work per clock 18% below SonicMoE's at an 11% higher clock): the short-K down tasks (about 2 us of
#   mainloop in 4.6 us per block) and the tail's sum (1.20 ms against SonicMoE's 1.05; more bytes in flight through
#   the stages did not help, so more warps on it: the producer warpgroup joining the tail);
# - anchor-3: the down tasks (about 2.05 against 1.69 ms) and the dispatch tasks (0.43 ms; call A);
# - anchor-5 and the large shapes (4% more work per clock, 5% less clock): energy per FLOP, i.e. B multicast in 2-CTA
#   clusters (round 9's branch, round 13's fix: +2-4% clock, -3-5% per GHz there);
# - the backward (0.66x / 0.83x / 0.86x SonicMoE at anchors 2 / 3 / 5): the pulls SonicMoE's gathering GEMMs avoid.
