# Round 34, calls 1-2 (nvidia-h200): the weighted sum as a kernel of its own (include/mok/weighted_sum.cuh,
# launch(sum_kernel=True)). (1) its GPU tests (bitwise against the combine tasks, refusals, the bad-schedule report);
# (2) ab_kernels.py, one build launched with sum_kernel=0 and =1, interleaved, bitwise compared, anchors 1-5;
# (3) profile_forward.py at anchors 2-3 with MOK_CUDA_SUM_KERNEL=1 (the sum kernel's own GPU time).
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_gpu.py -k "sum_kernel or no_row_holds" \
  > $K/tests.log 2>&1
echo "tests rc=$? +$(( $(date +%s)-T0 ))s"; tail -4 $K/tests.log | cut -c1-200
timeout 300 python3 experiments/ab_kernels.py --launch-a sum_kernel=0 --launch-b sum_kernel=1 --rounds 6 \
  anchor-2 anchor-3 anchor-1 anchor-4 anchor-5 > $K/ab_sum.log 2>&1
echo "ab rc=$? +$(( $(date +%s)-T0 ))s"; grep -vE "^\s*$" $K/ab_sum.log | tail -12 | cut -c1-200
MOK_CUDA_SUM_KERNEL=1 timeout 100 python3 experiments/profile_forward.py anchor-2 anchor-3 --backends cuda \
  > $K/profile_sum.log 2>&1
echo "profile rc=$? +$(( $(date +%s)-T0 ))s"; grep -iE "sum_kernel|moe_forward|^anchor" $K/profile_sum.log | head -12 | cut -c1-160
tar czf $OUT/call1.tgz -C $OUT k; ls $OUT
