# Round 30, call D (nvidia-h200, carrying .carry/sonic and .carry/quack: calls A and C's quack cache, .o files included,
# at the folder level quack reads, so that SonicMoE loads what it compiled there instead of tuning every GEMM again,
# as call C did: it had carried call A's choices one folder too deep): the training step side by side at anchor-5,
# SonicMoE's forward and backward beside torch, triton and cuda. Then the whole quack cache comes back again.
T0=$(date +%s)
K=$OUT/k; mkdir -p $K
mkdir -p build/mok-cache && cp -r .carry/quack build/mok-cache/quack
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown} QUACK_PRINT_AUTOTUNING=1
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-5 MOK_BENCH_SHAPES=anchor-5 MOK_TIMEOUT_BENCH=410 MOK_DEADLINE_S=430 \
  MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave --sonic-backward --stacks-every 60" \
  bash experiments/gpu_run.sh > $K/bench.log 2>&1
echo "bench rc=$? at +$(( $(date +%s) - T0 ))s"; grep -E "^anchor|geomean|Pre-compil|finished after" $K/bench.log | cut -c1-160
mv $OUT/gpu_results.tgz $K/ 2>/dev/null
du -sh build/mok-cache/quack; (cd build/mok-cache && find quack -type f ! -name "*.lock" | tar czf $K/quack_cache.tgz -T -); ls -la $K
