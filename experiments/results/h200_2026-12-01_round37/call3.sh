# Round 37, call 3 (nvidia-h200): call 2's timeline at anchor-3 gives the dispatch tasks 8.3% of the SMs' time, 50.6 us
# per 128-row task (1 MB moved: about 20 GB/s per SM), latency-bound: each warp's pass waits for its rows' table
# entries, then for the rows (64 KB in flight per SM). Candidates (ring-mode shapes):
#   patches/dispatch_table_once.patch: each warp looks its rows' sources up once per task (lane k, row k), then
#     shuffles them out;
#   patches/dispatch_table_once_chunks16.patch: that, and 16 chunks per lane (twice the bytes in flight).
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
P=experiments/results/h200_2026-12-01_round37/patches
el() { echo "$1 rc=$2 +$(( $(date +%s)-T0 ))s"; }
ab() {  # ab NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  timeout $limit python3 experiments/ab_kernels.py --rounds 8 "$@" > $K/ab_$name.log 2>&1
  el "ab $name" $?; grep -E "B/A|skipped|Error" $K/ab_$name.log | cut -c1-200
}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; el build $?
S="anchor-3 anchor-4 anchor-5 qwen3.5-397b/ep64 deepseek-v4-pro/ep64 kimi-k2.7/ep64 glm-5.2/ep64"
for c in dispatch_table_once_chunks16 dispatch_table_once; do ab $c 200 --patch $P/$c.patch $S; done
tar czf $OUT/call3.tgz -C $OUT k
