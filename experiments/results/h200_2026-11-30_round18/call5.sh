# Round 18, call 5 (branch overlap-steps): the overlapped-steps order against the plain one (one build, launched
# both ways, bitwise compared), its GPU tests, then memcheck and racecheck with its sanitize_check cases.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=overlap-steps
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 200 python3 experiments/ab_kernels.py --rounds 8 --launch-a overlap_steps=false --launch-b overlap_steps=true anchor-2 anchor-1 anchor-3 anchor-5 kimi-k2.7/ep64 qwen3.5-397b/ep64 > $K/ab_overlap.log 2>&1; echo ab rc=$?; grep 'B/A' $K/ab_overlap.log
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py -k "overlap" > $K/tests_overlap.log 2>&1; echo tests rc=$?; tail -2 $K/tests_overlap.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
