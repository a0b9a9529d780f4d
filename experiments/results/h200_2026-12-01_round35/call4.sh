# Round 35, call 4 (nvidia-h200, warm after call 3): is round 34's default path slower beside SonicMoE in the bench?
# Anchor-2: default (sum kernel) vs MOK_CUDA_SUM_KERNEL=0 (round 33's default); anchor-3: default (ring down_tma + sum
# kernel) vs MOK_CUDA_DOWN_TMA=0 (round 33's push). Each a bench run of its own with SonicMoE in the rotation; twice.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
ROOT_OUT=$OUT
run() {  # run NAME SHAPES [ENV...]
  local name=$1 shapes=$2; shift 2
  mkdir -p "$ROOT_OUT/$name"
  env "$@" OUT="$ROOT_OUT/$name" MOK_STAGES=bench MOK_SONIC_SHAPES=$shapes MOK_BENCH_SHAPES=$shapes \
    MOK_TIMEOUT_BENCH=120 MOK_DEADLINE_S=150 MOK_BENCH_ARGS="--backends cuda --passes fwd --interleave" \
    bash experiments/gpu_run.sh 2>&1 | grep -E "^anchor-[0-9] .* (cuda|sonicmoe) " | sed "s/^/$name: /"
  rm -f "$ROOT_OUT/$name/quack_cache.tgz"
}
for rep in 1 2; do
  run new$rep anchor-2,anchor-3
  run a2_old$rep anchor-2 MOK_CUDA_SUM_KERNEL=0
  run a3_old$rep anchor-3 MOK_CUDA_DOWN_TMA=0
done
