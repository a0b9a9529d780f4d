# Round 19, call 4 (main at b6a8bde: down_tma v3 merged, on by default in gather mode, lazy combine slots): the
# whole GPU suite, then memcheck and racecheck of every sanitize_check case.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=b6a8bde
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
MOK_STAGES=tests,sanitize MOK_TIMEOUT_SANITIZE=300 MOK_DEADLINE_S=570 bash experiments/gpu_run.sh > $K/suite.log 2>&1; tail -14 $K/suite.log
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/suite.tgz
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
