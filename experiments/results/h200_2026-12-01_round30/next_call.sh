# For the next GPU session (round 31). SonicMoE calls carry .carry/sonic (54 MB) and .carry/quack_cache.tgz (1.6 MB:
# SonicMoE's compiled GEMMs for anchors 2-5 forward and anchor-5 backward, round 30), and need experiments/results/
# moved out of the working tree while they run (64 MiB per call). experiments/gpu_run.sh seeds the cache from the
# tarball (new in round 30, not yet run on a GPU: check its "quack cache seeded" line) and returns it as
# quack_cache.tgz: keep the newest as .carry/quack_cache.tgz.
#
# Call A (nvidia-h200, about 4 minutes): does SonicMoE in the rotation slow the next backend? Every run with SonicMoE
# has read cuda's anchor-2 forward at about 8.2 ms, every run without it at 7.4-7.5 ms (round 17, one commit: 8.25 /
# 8.82). Three bench runs in one call, clocks, power and temperature logged beside them:
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 250 > $K/smi.csv 2>&1 & SMI=$!
for run in 1-without 2-with 3-without; do
  sonic=""; [ "$run" = 2-with ] && sonic=anchor-2,anchor-5
  MOK_STAGES=bench MOK_SONIC_SHAPES=$sonic MOK_BENCH_SHAPES=anchor-2,anchor-5 MOK_TIMEOUT_BENCH=150 MOK_DEADLINE_S=170 \
    MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh > $K/bench_$run.log 2>&1
  echo "$run: $(date +%T)"; grep -E "^anchor" $K/bench_$run.log | cut -c1-120
  mv $OUT/gpu_results.tgz $K/bench_$run.tgz 2>/dev/null; mv $OUT/quack_cache.tgz $K/ 2>/dev/null
done
kill $SMI
#
# Call B (nvidia-h200, about 7 minutes per shape): SonicMoE's training step at anchor-2, then anchor-3 in a call of
# its own (each shape's backward compiles four GEMMs on first use, about 5.5 minutes with its forward cached):
#   MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-2 MOK_BENCH_SHAPES=anchor-2 MOK_TIMEOUT_BENCH=480 MOK_DEADLINE_S=500 \
#     MOK_BENCH_ARGS="--backends torch,triton,cuda --interleave --sonic-backward" bash experiments/gpu_run.sh
#
# Call C (nvidia-h200, about 3 minutes): where anchor-5's backward goes per backend (SonicMoE's is 20.6 ms, cuda's
# 24.6, triton's 23.7 in round 30's call D; round 27's profile summed the cuda backward's kernels to 21.07 ms). First
# the GPU test of the new experiments/step_gaps.py, then the GPU's idle time inside the step as the bench launches it:
#   python3 -m pytest -q -m gpu tests/test_step_gaps.py
#   python3 experiments/step_gaps.py anchor-5 anchor-2 --backends cuda,triton,torch --json $OUT/k/step_gaps.json
#   for s in anchor-5 anchor-2; do python3 experiments/profile_backward.py $s --router --backends cuda,triton; done
