# Round 36, call 2 (nvidia-h200): call 1's two wins again, with more sizes, and round 35's sum-kernel candidates.
# (1) the ring-mode minibatch size: 4,352 / 8,192 / 16,384 rows against the default (two waves: 2,176 rows at H 7168)
#     at anchors 5, 3, 4; (2) gate/up raster with groups of 2 and 4 row tiles at anchor-5 and deepseek, anchor-3 and
#     the glm slice; (3) raster4 with 8,192-row minibatches (do they add?); (4) the sum kernel's 8 and 16 tokens per
#     CTA and the unchecked probe at anchors 2, 3, 1.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
R35=experiments/results/h200_2026-12-01_round35/patches R36=experiments/results/h200_2026-12-01_round36/patches
el() { echo "$1 rc=$2 +$(( $(date +%s)-T0 ))s"; }
ab() {  # ab NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  timeout $limit python3 experiments/ab_kernels.py --rounds 8 "$@" > $K/ab_$name.log 2>&1
  el "ab $name" $?; grep -E "B/A|skipped|Error" $K/ab_$name.log | cut -c1-200
}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; el build $?
for mb in 4352 8192 16384; do ab mb$mb 80 --prepare-b minibatch_rows=$mb anchor-5 anchor-3 anchor-4; done
ab raster4 90 --patch $R35/gate_up_raster4.patch anchor-5 deepseek-v4-pro/ep64 anchor-3 glm-5.2/ep64
ab raster2 90 --patch $R36/gate_up_raster2.patch anchor-5 deepseek-v4-pro/ep64 anchor-3 glm-5.2/ep64
ab raster4_mb8192 90 --patch $R35/gate_up_raster4.patch --prepare-b minibatch_rows=8192 anchor-5 anchor-3 anchor-4
for p in sum_tokens8 sum_tokens16 sum_unchecked_probe; do ab $p 80 --patch $R35/$p.patch anchor-2 anchor-3 anchor-1; done
tar czf $OUT/call2.tgz -C $OUT k
