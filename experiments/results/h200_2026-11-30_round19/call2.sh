# Round 19, call 2: down_tma v2 (patches/down_tma_v2_on_down_tma.patch on top of round 18's down_tma.patch): only
# the TMA store uses the box layout (every other epilogue keeps main's row layout), and the second half's boxes
# drain during the next block's mainloop. Bitwise tests, A/B of one build launched with and without down_tma (so
# against main's kernel in effect), timelines at anchor-2 both ways, then racecheck with the down_tma cases.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=18bd1f8+down_tma_v2
K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-11-30_round19
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
git apply experiments/results/h200_2026-11-30_round18/patches/down_tma.patch && git apply $R/patches/down_tma_v2_on_down_tma.patch && echo applied
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "down_tma or poison" > $K/tests_down_tma.log 2>&1; echo tests rc=$?; tail -3 $K/tests_down_tma.log
timeout 240 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_tma=false --launch-b down_tma=true anchor-2 anchor-1 anchor-3 anchor-5 kimi-k2.7/ep64 > $K/ab_down_tma.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_down_tma.log | head -20
timeout 90 python3 experiments/task_timeline.py anchor-2 > $K/timeline_push.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline_push 2>/dev/null
MOK_CUDA_DOWN_TMA=1 timeout 90 python3 experiments/task_timeline.py anchor-2 > $K/timeline_tma.log 2>&1; echo tl2 rc=$?; mv $OUT/results $K/timeline_tma 2>/dev/null
grep -iE "down|gate|combine" $K/timeline_push.log | head -8; grep -iE "down|gate|combine" $K/timeline_tma.log | head -8
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
