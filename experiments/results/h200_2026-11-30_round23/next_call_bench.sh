# For the next GPU session (round 24), call 3: the layer bench at HEAD, torch and cuda on the anchors and the EP-64
# slices, SonicMoE beside them at anchors 2-5, forward, interleaved (about 6 minutes). Carry .carry/sonic (build it
# with ../shared/tools/sonic_bundle.sh) and move experiments/results/h200_2026-11-29_round7/ncu_gemm_gap.ncu-rep out
# of the tree for the call (the 64 MiB limit; restore it after). Set MOK_GIT_COMMIT by hand.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" MOK_DEADLINE_S=480 bash experiments/gpu_run.sh > $K/bench.log 2>&1; grep -E 'fwd|geomean' $K/bench.log | grep -v ERROR | tail -30
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench.tgz
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
