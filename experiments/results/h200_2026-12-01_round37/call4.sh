# Round 37, call 4 (nvidia-h200): call 3's two dispatch candidates again with 16 rounds (call 3: 0.984-1.009, near the
# noise), at the ring-mode shapes where dispatch is a larger share (anchors 3-5, the qwen and kimi slices).
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
P=experiments/results/h200_2026-12-01_round37/patches
el() { echo "$1 rc=$2 +$(( $(date +%s)-T0 ))s"; }
ab() {  # ab NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  timeout $limit python3 experiments/ab_kernels.py --rounds 16 "$@" > $K/ab_$name.log 2>&1
  el "ab $name" $?; grep -E "B/A|skipped|Error" $K/ab_$name.log | cut -c1-200
}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; el build $?
S="anchor-3 anchor-4 anchor-5 qwen3.5-397b/ep64 kimi-k2.7/ep64"
for c in dispatch_table_once dispatch_table_once_chunks16; do ab $c 220 --patch $P/$c.patch $S; done
tar czf $OUT/call4.tgz -C $OUT k
