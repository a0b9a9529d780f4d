# Round 32, call 3 (nvidia-h200): (1) the streamed tail again, now with one cp.async group and one wait per 4 pieces
# (call 2's one wait per piece was 1.02-1.06x slower: the loop waited on every 16 bytes); against HEAD, bitwise
# compared; (2) router_topk_bench.py with the sorted-key and tl.topk candidates (anchor-2's top-k took 114 us of
# the layer in call 1, SonicMoE's top-k and softmax 39 us).
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
R=experiments/results/h200_2026-12-01_round32/patches
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 200 python3 experiments/ab_kernels.py --patch $R/streamed_combine_grouped_d32.patch --rounds 8 \
  anchor-2 anchor-1 anchor-3 anchor-5 > $K/ab_grouped_d32.log 2>&1
echo "ab grouped d32 rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor|^[AB] =" $K/ab_grouped_d32.log | cut -c1-200
timeout 120 python3 experiments/ab_kernels.py --patch $R/streamed_combine_grouped_d48.patch --rounds 8 anchor-2 anchor-3 \
  > $K/ab_grouped_d48.log 2>&1
echo "ab grouped d48 rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor" $K/ab_grouped_d48.log | cut -c1-200
timeout 150 python3 experiments/router_topk_bench.py --shapes 32768x256x16 24576x128x8 32768x64x4 8192x64x8 \
  > $K/topk.log 2>&1
echo "topk rc=$? +$(( $(date +%s)-T0 ))s"; cat $K/topk.log | cut -c1-140
tar czf $OUT/call3.tgz -C $OUT k; ls $OUT
