# Round 19, call 3: down_tma v3 (patches/down_tma_v3_on_down_tma.patch on round 18's down_tma.patch): v2 plus the
# weighted sum reading y through a (row, weight) table in shared memory, 4 items per thread again. Bitwise tests,
# A/B of one build launched with and without down_tma, the anchor-2 timeline, racecheck of the pipelined variant.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=18bd1f8+down_tma_v3
K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-11-30_round19
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
git apply experiments/results/h200_2026-11-30_round18/patches/down_tma.patch && git apply $R/patches/down_tma_v3_on_down_tma.patch && echo applied
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "down_tma or poison or early_combine" > $K/tests_down_tma.log 2>&1; echo tests rc=$?; tail -3 $K/tests_down_tma.log
timeout 200 python3 experiments/ab_kernels.py --rounds 8 --launch-a down_tma=false --launch-b down_tma=true anchor-2 anchor-1 anchor-3 anchor-5 > $K/ab_down_tma.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_down_tma.log | head -20
MOK_CUDA_DOWN_TMA=1 timeout 90 python3 experiments/task_timeline.py anchor-2 > $K/timeline_tma.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline_tma 2>/dev/null; sed -n 2,8p $K/timeline_tma.log
timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -2 $K/racecheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
