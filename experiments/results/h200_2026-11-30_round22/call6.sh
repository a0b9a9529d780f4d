# Round 22, call 6 (main at 350c981, MOK_GIT_COMMIT set by hand): the CUDA GPU test files (the template flag
# in store_down_block_tma), then the layer bench: torch and cuda on the anchors and the EP-64 slices, SonicMoE beside
# them at anchors 2-5, forward, interleaved. Carries .carry/sonic (ncu_gemm_gap.ncu-rep moved out for the 64 MiB).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_cuda_gpu.py tests/test_cuda_trace_gpu.py > $K/cuda_tests.log 2>&1; echo cuda-tests rc=$?; tail -1 $K/cuda_tests.log
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" MOK_DEADLINE_S=420 bash experiments/gpu_run.sh > $K/bench.log 2>&1; grep -E 'fwd|geomean' $K/bench.log | grep -v ERROR | tail -30
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench.tgz
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
