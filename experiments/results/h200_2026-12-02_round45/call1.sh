# Round 45, call 1: round 44's next_call.sh. Does the L2 evict-first policy on the ring copies
# (round 44's dispatch_evict_first.patch) pay in the plain order, and in clusters + spread, at more shapes?
# Interleaved A/B in one process (ab_kernels.py, 30 rounds of 10 launches, outputs compared bit for bit).
export TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions NCCL_NVLS_ENABLE=0
P=experiments/results/h200_2026-12-02_round44/dispatch_evict_first.patch
AB="env PYTHONPATH=. python3 experiments/ab_kernels.py --dispatch ring --rounds 30 --launches 10"
mkdir -p $OUT/call1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader | tee $OUT/call1/gpu.txt
timeout 290 $AB --patch $P anchor-3 anchor-4 anchor-5 kimi-k2.7/ep64 2>&1 | tee $OUT/call1/ab_plain.log | grep -E "^A =|^B =|B/A|rror"
timeout 250 $AB --patch $P --launch-a clusters=true --launch-b clusters=true --launch-b spread_dispatch=true \
  anchor-3 anchor-4 kimi-k2.7/ep64 2>&1 | tee $OUT/call1/ab_clusters_spread.log | grep -E "^A =|^B =|B/A|rror"
