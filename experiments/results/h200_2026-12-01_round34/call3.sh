# Round 34, call 3 (nvidia-h200): the sum kernel's tiling. ab_kernels.py, both builds with sum_kernel=1: A this tree
# (2 items x 4 k = 8 loads in flight per thread, 80 registers, 3 CTAs per SM, 4 tokens per CTA), B a patch:
# patches/sum_items4.patch (4 items: 16 loads, 128 registers, 2 CTAs per SM) and patches/sum_tokens2.patch (2 tokens
# per CTA); anchors 2, 1, 3.
T0=$(date +%s); K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-12-01_round34
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
for p in sum_items4 sum_tokens2; do
  timeout 240 python3 experiments/ab_kernels.py --patch $R/patches/$p.patch --launch-a sum_kernel=1 \
    --launch-b sum_kernel=1 --rounds 6 anchor-2 anchor-1 anchor-3 > $K/ab_$p.log 2>&1
  echo "ab $p rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "B/A" $K/ab_$p.log | cut -c1-200
done
tar czf $OUT/call2.tgz -C $OUT k; ls $OUT
