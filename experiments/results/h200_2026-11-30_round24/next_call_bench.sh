# For the next GPU session (round 25), a call of its own (about 6 minutes; call 8 of round 24 ran out of its 266 s
# stage limit at SonicMoE's first compile): the layer bench at HEAD, torch and cuda on the anchors and the EP-64
# slices, SonicMoE beside them at anchors 2-5, forward, interleaved. Carry .carry/sonic (build it with
# ../shared/tools/sonic_bundle.sh) and move out of the tree for the call (the 64 MiB limit; restore them after):
# experiments/results/h200_2026-11-29_round7/ncu_gemm_gap.ncu-rep, experiments/results/h200_2026-11-30_round19/call4/k/
# suite.log and experiments/results/h200_2026-11-30_round24/ (so run this script's lines inline). Set MOK_GIT_COMMIT
# by hand.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" MOK_DEADLINE_S=560 bash experiments/gpu_run.sh > $K/bench.log 2>&1; grep -E 'fwd|geomean' $K/bench.log | grep -v ERROR | tail -30
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench.tgz
