# For the next GPU session (round 36). None of this has run; each call is a few minutes.
#
# Call A (nvidia-h200): the minibatch size in ring mode, timed. Round 35's call 8 read 12% less DRAM and 0.96x the
# megakernel's time under ncu with 8,192-row minibatches at anchor-5 (one forward): A/B it properly (interleaved,
# bitwise compared; the minibatch size must change no bit):
#   export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions \
#     TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=<hash>
#   python3 -m mok.cuda.build --jit
#   for mb in 4352 8192 16384; do
#     python3 experiments/ab_kernels.py --prepare-b minibatch_rows=$mb --rounds 8 anchor-3 anchor-4 anchor-5
#   done
#   (then anchors 1-2, gather mode, with minibatch_rows=8192 and 16384; a win needs a policy change in
#   mok/heuristics.py and the bench beside SonicMoE)
#
# Call A2 (nvidia-h200): the gate/up task order for L2 reuse of the weights. At anchor-5 an expert's gate/up is 8 row
# tiles x 16 column blocks; in tile-major order (now) a weight column block (3.7 MB) is read by tasks 16 tickets
# apart, so all of W1 (59 MB) must stay in L2 for its reuse, and round 35 measured the weights read about 3.5 times
# from DRAM. patches/gate_up_raster8.patch (and 4) order G(s) column-major within groups of 8 (4) row tiles: a
# column block's tasks back to back, the group's A tiles (15 MB) held instead. Decode only (scheduler.cuh); compiled
# here without spills (raster8) and the CPU task-order simulator passes on it (146 cases). Expect it at anchor-5 and
# the kimi / deepseek slices (H 7168), hardly at anchors 3-4 (W1 of an expert 17 MB fits in L2):
#   for p in gate_up_raster8 gate_up_raster4; do
#     python3 experiments/ab_kernels.py --patch experiments/results/h200_2026-12-01_round35/patches/$p.patch \
#       --rounds 8 anchor-5 kimi-k2.7/ep64 deepseek-v4-pro/ep64 anchor-4
#   done
#   and the traffic of the winner (apply the patch to the tree, MOK_STAGES=traffic MOK_TRAFFIC_SHAPES=anchor-5).
#
# Call B (nvidia-h200): the sum kernel's table prologue. SonicMoE's sum is 5% (anchor-2) and 11% (anchor-3) faster
# on the same bytes. Candidates in patches/: 8 and 16 tokens per CTA (the prologue's dependent loads over more
# rows), and a probe without the inverse map's check (prices checked_y_row's two loads; not for adoption):
#   for p in sum_tokens8 sum_tokens16 sum_unchecked_probe; do
#     python3 experiments/ab_kernels.py --patch experiments/results/h200_2026-12-01_round35/patches/$p.patch \
#       --rounds 8 anchor-2 anchor-3 anchor-1
#   done
#   (the layer's A/B moves by a few tenths of a percent per 5% of the sum: time the sum alone too, e.g.
#   MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-2 anchor-3" on a tree with the patch applied)
#
# Call C: where the megakernel's extra instructions go at anchor-2 (1.36 G per forward against 0.90 G in SonicMoE's
# GEMMs): ncu's source counters (--section SourceCounters, or --set full with --import-source no and the SASS page)
# on one launch of experiments/ncu_gemm_gap.py anchor-2 --launch; are they the waits' polling loops?
#
# SonicMoE: carry .carry/sonic (../shared/tools/sonic_bundle.sh, 2 minutes here) and .carry/quack_cache.tgz, a copy
# of this folder's quack_cache.tgz (31 compiled GEMMs, returned by call 7: anchors 2-5's forwards need no compiling
# with it, where call 2 spent most of its 293 s compiling anchor-2's), and move experiments/results/ out of the tree while the
# call runs (the bundle is 54 MB of the 64 MiB):
#   cp experiments/results/h200_2026-12-01_round35/quack_cache.tgz .carry/ && mv experiments/results /tmp/results_stash
