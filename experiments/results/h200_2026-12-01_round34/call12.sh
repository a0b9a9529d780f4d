# Round 34, call 12 (nvidia-h200): after the review: the sum kernel checks its source rank's push count (a lost row is
# reported instead of summed stale), reads the output row pointer at the store (no spill), ring mode's auto down_tma
# only where the sum kernel sums and not with store warps asked for. The sum kernel's GPU tests (with the new
# lost-row test), the trace with the sum kernel, the bad-schedule reports.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
T0=$(date +%s); python3 -m mok.cuda.build --jit > /dev/null 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 150 python3 -m pytest -q -p no:cacheprovider -x tests/test_cuda_gpu.py tests/test_cuda_trace_gpu.py \
  -k "sum_kernel or no_row_holds or bad_schedule_row or inconsistent_schedule" 2>&1 | tail -6 | cut -c1-200
echo "tests +$(( $(date +%s)-T0 ))s"
