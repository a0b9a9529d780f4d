# Round 36, call 3 (nvidia-h200): the minibatch size as a policy, across every anchor and slice. waves_ab.py registers
# waves3 / waves4 / waves6 (the two-wave rule's threshold at 3, 4, 6 SM waves) and runs ab_kernels.py; then raster4
# alone at the shapes call 1-2 did not cover, and raster4 with waves4 against HEAD everywhere.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
R35=experiments/results/h200_2026-12-01_round35/patches R36=experiments/results/h200_2026-12-01_round36
el() { echo "$1 rc=$2 +$(( $(date +%s)-T0 ))s"; }
ab() {  # ab NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  timeout $limit python3 $R36/waves_ab.py --rounds 8 "$@" > $K/ab_$name.log 2>&1
  el "ab $name" $?; grep -E "B/A|skipped|Error" $K/ab_$name.log | cut -c1-200
}
ALL="anchor-5 anchor-4 anchor-3 kimi-k2.7/ep64 glm-5.2/ep64 qwen3.5-397b/ep64 deepseek-v4-pro/ep64 anchor-2 anchor-1"
RING="anchor-5 anchor-4 anchor-3 kimi-k2.7/ep64 glm-5.2/ep64 qwen3.5-397b/ep64 deepseek-v4-pro/ep64"
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; el build $?
ab waves4 120 --prepare-b policy=waves4 $ALL
ab waves3 80 --prepare-b policy=waves3 $RING
ab waves6 80 --prepare-b policy=waves6 $RING
ab raster4 100 --patch $R35/gate_up_raster4.patch kimi-k2.7/ep64 qwen3.5-397b/ep64 glm-5.2/ep64 anchor-2 anchor-1
ab raster4_waves4 130 --patch $R35/gate_up_raster4.patch --prepare-b policy=waves4 $ALL
tar czf $OUT/call3.tgz -C $OUT k
