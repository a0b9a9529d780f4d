# Round 30, call A (nvidia-h200, carrying .carry/sonic; experiments/results moved out of the copied tree so that the
# bundle and the tree fit in 64 MiB): SonicMoE side by side at anchors 2-5, forward (part 1), then SonicMoE's
# backward at anchor-5 with its compile progress and stacks printed (part 2), then what quack cached (part 3).
T0=$(date +%s)
K=$OUT/k; mkdir -p $K
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 \
  MOK_TIMEOUT_BENCH=330 MOK_DEADLINE_S=350 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" \
  bash experiments/gpu_run.sh > $K/bench_fwd.log 2>&1
echo "part 1 rc=$? at +$(( $(date +%s) - T0 ))s"; grep -E "sonicmoe|cuda  |geomean" $K/bench_fwd.log | cut -c1-150
mv $OUT/gpu_results.tgz $K/bench_fwd.tgz 2>/dev/null
export PYTHONPATH=/tmp/sonic:/tmp/sonic/nvidia_cutlass_dsl/python_packages:$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions \
  TRITON_CACHE_DIR=$PWD/build/mok-cache/triton QUACK_CACHE_DIR=$PWD/build/mok-cache/quack QUACK_CACHE_AUTOTUNING=1 \
  QUACK_COMPILE_WORKERS=$(nproc) QUACK_PRINT_AUTOTUNING=1
left=$(( 560 - ($(date +%s) - T0) ))
echo "part 2: SonicMoE backward at anchor-5, $left s"
timeout $left python3 -m mok.bench --shapes anchor-5 --backends cuda --passes fwd,bwd --sonic --sonic-shapes anchor-5 \
  --sonic-backward --stacks-every 45 --max-seconds 8 --out $K/bwd_results > $K/bench_bwd.log 2>&1
echo "part 2 rc=$? at +$(( $(date +%s) - T0 ))s"; grep -E "anchor-5" $K/bench_bwd.log | cut -c1-150; tail -5 $K/bench_bwd.log | cut -c1-200
du -sh build/mok-cache/quack; find build/mok-cache/quack -type f | wc -l
(cd build/mok-cache && find quack -type f ! -name "*.o" ! -name lock | tar czf $K/quack_autotune.tgz -T -) ; ls -la $K
