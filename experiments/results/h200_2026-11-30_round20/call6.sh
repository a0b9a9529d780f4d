# Round 20, call 6: the h rows of the bf16 gate/up epilogue by TMA store (patches/h_tma.patch on main f145ed7):
# A/B of main against the patched build (one process, interleaved, bitwise compared), then the patch applied: the
# CUDA GPU tests, racecheck and memcheck of sanitize_check.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=f145ed7+h_tma
K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-11-30_round20
timeout 200 python3 experiments/ab_kernels.py --rounds 8 --patch $R/patches/h_tma.patch anchor-2 anchor-1 anchor-3 anchor-5 kimi-k2.7/ep64 qwen3.5-397b/ep64 > $K/ab_h_tma.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_h_tma.log
git apply $R/patches/h_tma.patch && echo applied
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_rank_run_gpu.py tests/test_cuda_trace_gpu.py tests/test_mxfp8_gpu.py tests/test_distributed_gpu.py tests/test_pointer_table_gpu.py > $K/tests.log 2>&1; echo tests rc=$?; tail -3 $K/tests.log
timeout 170 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
