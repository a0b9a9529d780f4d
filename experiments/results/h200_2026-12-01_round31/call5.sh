# Round 31, call 5 (nvidia-h200, carrying .carry/sonic and call 4's .carry/quack_cache.tgz; experiments/results/ moved
# out): the bench's new direct backward time (harness.mark_backward_start: each fwd+bwd call's time from its
# backward's start to its end) on the GPU: the bench's GPU tests, then the training step at anchor-2 and anchor-5 side
# by side, torch / triton / cuda / SonicMoE, in the balanced order.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
export PYTHONPATH=$PWD TRITON_CACHE_DIR=$PWD/build/mok-cache/triton TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions
timeout 120 python3 -m pytest -q -m gpu tests/test_bench.py > $K/gpu_tests.log 2>&1; echo "tests rc=$? +$(( $(date +%s)-T0 ))s"; tail -2 $K/gpu_tests.log
left=$(( 570 - ($(date +%s)-T0) ))
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2,anchor-5 MOK_BENCH_SHAPES=anchor-2,anchor-5 MOK_TIMEOUT_BENCH=$(( left - 20 )) \
  MOK_DEADLINE_S=$left MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave --sonic-backward" \
  bash experiments/gpu_run.sh > $K/bench_step.log 2>&1
echo "step rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor" $K/bench_step.log | cut -c1-150
mv $OUT/gpu_results.tgz $K/bench_step.tgz; rm -f $OUT/quack_cache.tgz
tar xzf $K/bench_step.tgz -C $K 2>/dev/null; cat $K/results/bench_2026*.md 2>/dev/null | grep -E "^\| anchor"; rm -rf $K/results; ls -la $K
