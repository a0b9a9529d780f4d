# Round 34, call 4 (nvidia-h200): down_tma in ring mode, now that its weighted sum runs in the sum kernel
# (round 20 measured down_tma there 1.013-1.078x slower, with the in-kernel sum through the inverse map):
# ab_kernels.py, A the default (push into the slots, store warps, combine tasks), B down_tma=1 (the sum kernel by
# auto) with one column block per task, then with two; anchors 3-5.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
for span in 1 2; do
  timeout 100 python3 experiments/ab_kernels.py --launch-b down_tma=1 --launch-b down_span=$span --rounds 6 \
    anchor-3 anchor-4 anchor-5 > $K/ab_down_tma_span$span.log 2>&1
  echo "ab span $span rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "B/A" $K/ab_down_tma_span$span.log | cut -c1-200
done
tar czf $OUT/call3.tgz -C $OUT k; ls $OUT
