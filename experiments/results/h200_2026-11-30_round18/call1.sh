export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=0c65ce7
K=$OUT/k; mkdir -p $K; P=experiments/results/h200_2026-11-30_round17/patches/taskqueue_lane0_read.patch
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 150 python3 experiments/ab_kernels.py --patch $P anchor-2 anchor-5 > $K/ab.log 2>&1; echo ab rc=$?; tail -6 $K/ab.log
git apply $P && echo applied
MOK_GIT_COMMIT=0c65ce7+lane0 MOK_STAGES=tests,sanitize MOK_DEADLINE_S=380 bash experiments/gpu_run.sh > $K/suite.log 2>&1; tail -12 $K/suite.log
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/suite.tgz
for i in 1 2; do timeout 80 compute-sanitizer --tool racecheck python3 -m mok.cuda.sanitize_check > $K/race_lane0_$i.log 2>&1; echo race$i rc=$?; tail -1 $K/race_lane0_$i.log; done
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz; ls -la $OUT
