# Round 36, call 1 (nvidia-h200): round 35's candidates for the weights' L2 reuse and the minibatch size.
# (1) gate_up_raster8 / raster4 (G(s) column-major within groups of 8 / 4 row tiles) against HEAD at anchor-5, the
#     kimi and deepseek slices (H 7168) and anchor-4; (2) the ring-mode minibatch size, 8,192 rows against the default,
#     at anchors 5, 3 and 4. ab_kernels.py: one process, interleaved rounds, outputs compared bit for bit.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
R=experiments/results/h200_2026-12-01_round35/patches
el() { echo "$1 rc=$2 +$(( $(date +%s)-T0 ))s"; }
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; el build $?
for p in gate_up_raster8 gate_up_raster4; do
  timeout 190 python3 experiments/ab_kernels.py --patch $R/$p.patch --rounds 8 \
    anchor-5 kimi-k2.7/ep64 deepseek-v4-pro/ep64 anchor-4 > $K/ab_$p.log 2>&1
  el "ab $p" $?; grep -E "B/A|skipped|Error" $K/ab_$p.log | cut -c1-200
done
timeout 150 python3 experiments/ab_kernels.py --prepare-b minibatch_rows=8192 --rounds 8 anchor-5 anchor-3 anchor-4 \
  > $K/ab_mb8192.log 2>&1
el "ab mb8192" $?; grep -E "B/A|skipped|Error" $K/ab_mb8192.log | cut -c1-200
tar czf $OUT/call1.tgz -C $OUT k
