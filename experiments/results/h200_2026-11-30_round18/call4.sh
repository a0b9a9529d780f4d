# Round 18, call 4: the combine with 8 items per thread (a candidate that spills 36 bytes: is the tail worth a
# rework?), then the layer bench at HEAD: torch and cuda on the anchors and slices, SonicMoE beside them at anchors 2-5.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=9fb0758
R=experiments/results/h200_2026-11-30_round18; K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 110 python3 experiments/ab_kernels.py --patch $R/patches/combine_items_8.patch --rounds 8 anchor-2 anchor-3 > $K/ab_combine8.log 2>&1; echo ab rc=$?; tail -2 $K/ab_combine8.log
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" MOK_DEADLINE_S=440 bash experiments/gpu_run.sh > $K/bench.log 2>&1; grep -E 'fwd|geomean' $K/bench.log | grep -v ERROR | tail -30
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/stage.tgz
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
