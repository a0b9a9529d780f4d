# Round 21, call 5 (main at 9b88461, ping-pong merged): the layer bench, torch and cuda on the anchors and the kimi slice (the other slices: call 6),
# SonicMoE beside them at anchors 2-5, interleaved.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=$(git rev-parse --short HEAD)
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,kimi-k2.7/ep64 MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" MOK_DEADLINE_S=440 bash experiments/gpu_run.sh > $K/bench.log 2>&1; grep -E 'fwd|geomean' $K/bench.log | grep -v ERROR | tail -30
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench.tgz
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
