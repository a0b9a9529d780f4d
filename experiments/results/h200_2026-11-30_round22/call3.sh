# Round 22, call 3 (main 4adbbd4 with pp_early_handover.patch applied in the working tree): racecheck of the pipelined
# gather launches (the ping-pong's turns), memcheck, and the CUDA GPU test files.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 150 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck.log 2>&1; echo racecheck rc=$?; tail -1 $K/racecheck.log
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_trace_gpu.py tests/test_cuda_mxfp8.py > $K/cuda_tests.log 2>&1; echo cuda-tests rc=$?; tail -1 $K/cuda_tests.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
