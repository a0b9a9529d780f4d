# Round 22, call 5 (main with the saved rows' TMA stores as a patch): kernel A/B of a training forward (the saved
# gate/up rows written, --saved-rows) at anchors 1-2 (gather) and anchor-5, the kimi slice (ring); then the patch
# applied: the saved-row tests, racecheck (pipelined gather) and memcheck of sanitize_check (which writes the saved rows).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
P=experiments/results/h200_2026-11-30_round22/patches/saved_rows_tma.patch
timeout 220 python3 experiments/ab_kernels.py --rounds 8 --saved-rows --patch $P anchor-2 anchor-1 anchor-5 kimi-k2.7/ep64 > $K/ab_saved_tma.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_saved_tma.log
git apply $P && echo applied || exit 1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_backward_recompute.py tests/test_cuda_mxfp8.py tests/test_cuda_gpu.py > $K/tests_saved.log 2>&1; echo tests rc=$?; tail -2 $K/tests_saved.log
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 75 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
git apply -R $P
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
