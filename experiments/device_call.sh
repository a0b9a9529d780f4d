# Sourced by the per-call scripts of the results folders (experiments/results/h200_*/callN.sh) on the H200 machine,
# from the repository root with $OUT set: the environment of a direct run (the JIT and Triton caches under build/),
# a timer `el`, `build_jit`, and `ab`, which runs experiments/ab_kernels.py with $AB_ROUNDS rounds (default 8), keeps
# its log in $K and prints its result lines. Results go under $K = $OUT/k.
T0=$(date +%s); K=$OUT/k; mkdir -p "$K"
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
el() { echo "$1 rc=$2 +$(( $(date +%s)-T0 ))s"; }
build_jit() { python3 -m mok.cuda.build --jit > "$K/build.log" 2>&1; el build $?; }
ab() {  # ab NAME TIMEOUT ARGS...
  local name=$1 limit=$2; shift 2
  timeout "$limit" python3 experiments/ab_kernels.py --rounds "${AB_ROUNDS:-8}" "$@" > "$K/ab_$name.log" 2>&1
  el "ab $name" $?; grep -E "B/A|skipped|Error" "$K/ab_$name.log" | cut -c1-200
}
