# Round 32, call 2 (nvidia-h200): the tail's weighted sum streamed through the idle stages with cp.async
# (patches/streamed_combine_d32.patch: 32 pieces of 16 bytes in flight per consumer thread; _d48: 48), against HEAD,
# one process, rotated rounds, bitwise compared (ab_kernels.py); then the task timeline of the d32 build at anchors 2-3.
# The patches' tails are streamed-only (the early combine's register loops removed: timing builds, not for merging).
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
R=experiments/results/h200_2026-12-01_round32/patches
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 260 python3 experiments/ab_kernels.py --patch $R/streamed_combine_d32.patch --rounds 8 \
  anchor-2 anchor-1 anchor-3 anchor-5 anchor-4 > $K/ab_d32.log 2>&1
echo "ab d32 rc=$? +$(( $(date +%s)-T0 ))s"; grep -vE "^\s*$" $K/ab_d32.log | tail -14 | cut -c1-200
timeout 150 python3 experiments/ab_kernels.py --patch $R/streamed_combine_d48.patch --rounds 8 anchor-2 anchor-3 \
  > $K/ab_d48.log 2>&1
echo "ab d48 rc=$? +$(( $(date +%s)-T0 ))s"; grep -vE "^\s*$" $K/ab_d48.log | tail -6 | cut -c1-200
timeout 100 python3 experiments/task_timeline.py --patch $R/streamed_combine_d32.patch anchor-2 anchor-3 > $K/timeline.log 2>&1
echo "timeline rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor|combine|down |gate_up" $K/timeline.log | cut -c1-160
cp experiments/results/task_timeline_* $K/ 2>/dev/null
tar czf $OUT/call2.tgz -C $OUT k; ls $OUT
