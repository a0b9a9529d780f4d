# Round 18, call 2: A/B of the deferred second-half push (anchor-2, anchor-1: gather mode, spans 8 and 6). If it
# gains on both (B/A < 0.995), the whole GPU suite, memcheck and racecheck with it applied; otherwise the task
# timeline at anchor-2 with and without it (what the down tasks' time did).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=586e72d
R=experiments/results/h200_2026-11-30_round18; K=$OUT/k; mkdir -p $K; P=$R/patches/deferred_half_push.patch
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 170 python3 experiments/ab_kernels.py --patch $P --rounds 8 anchor-2 anchor-1 > $K/ab.log 2>&1; echo ab rc=$?; tail -4 $K/ab.log
if python3 -c "import re,sys; r=[float(x) for x in re.findall(r'B/A time ([0-9.]+)', open('$K/ab.log').read())]; sys.exit(0 if len(r)==2 and max(r)<0.995 else 1)"; then
  git apply $P && echo applied
  MOK_GIT_COMMIT=586e72d+deferred MOK_STAGES=tests,sanitize MOK_DEADLINE_S=300 bash experiments/gpu_run.sh > $K/suite.log 2>&1; tail -8 $K/suite.log
else
  for a in "" "--patch $P"; do timeout 120 python3 experiments/task_timeline.py $a anchor-2 >> $K/timeline.log 2>&1; done; grep -i 'down\|gate' $K/timeline.log | tail -8; cp experiments/results/task_timeline_anchor-2* $K/ 2>/dev/null
fi
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/stage.tgz
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz; ls -la $OUT
