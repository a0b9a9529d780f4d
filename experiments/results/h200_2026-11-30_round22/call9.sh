# Round 22, call 9 (the first minibatch's dispatch in parts, committed just before):
# the CUDA GPU test files (the parts' bitwise tests, the trace's task counts), then one build launched two ways at the
# ring-mode shapes (first_dispatch_parts=1, the old order, against auto), then racecheck of the pipelined ring launch.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 190 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs -x tests/test_cuda_gpu.py tests/test_cuda_trace_gpu.py tests/test_cuda_mxfp8.py > $K/cuda_tests.log 2>&1; echo cuda-tests rc=$?; tail -3 $K/cuda_tests.log
timeout 120 python3 experiments/ab_kernels.py --rounds 6 --launch-a first_dispatch_parts=1 --launch-b first_dispatch_parts=0 qwen3.5-397b/ep64 kimi-k2.7/ep64 deepseek-v4-pro/ep64 glm-5.2/ep64 anchor-3 > $K/ab_parts.log 2>&1; echo ab rc=$?; grep -E 'B/A|Error' $K/ab_parts.log
timeout 75 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch ring > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
