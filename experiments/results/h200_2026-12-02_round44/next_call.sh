# For the next GPU session (round 45). None of this has run.
#
# Round 44's spread order is slower held at the power limit, because copies among the gate/up bands cost DRAM reads
# (anchor-5: +1.66 GB). The L2 evict-first policy on the copies (dispatch_evict_first.patch) won part of that back in
# short interleaved A/Bs at anchors 3 and 5 (call 3). Before anything is built on it, the same A/B at the other shapes
# where clusters matter, with the plain order too (the policy alone, without spread, on the kernel's default path):
#   P=experiments/results/h200_2026-12-02_round44/dispatch_evict_first.patch
#   AB="env PYTHONPATH=. python3 experiments/ab_kernels.py --dispatch ring --rounds 30 --launches 10"
#   $AB --patch $P anchor-3 anchor-4 anchor-5 kimi-k2.7/ep64
#   $AB --patch $P --launch-a clusters=true --launch-b clusters=true --launch-b spread_dispatch=true \
#     anchor-4 kimi-k2.7/ep64
# (run gpu_run.sh with any stage first in the call: it sets the machine up). A win there needs the power-limit check:
# energy_per_layer.py takes no patch, so the policy would first become a runtime switch of dispatch.cuh.
#
# The other lead left open: pairs for the down GEMM in clusters (two column blocks of one row tile share its h rows by
# multicast; the W group's tickets (2i, 2i + 1) are already such pairs where the down tasks per tile are even). Round
# 42's bare mainloop: +1.6-1.8% at the down GEMM's K, through the clock; the clusters' balance says to expect little.
