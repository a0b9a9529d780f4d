# For the next GPU session (round 23), one call of about 8-9 minutes on a fresh machine: the whole GPU suite at the
# tree's HEAD (round 22 ran the CUDA test files after each kernel change, and the whole suite only at 4adbbd4), racecheck
# of both pipelined modes and memcheck, then the task timelines of the slices after the first dispatch in parts.
# A second call (next_call_bench.sh) runs the layer bench with SonicMoE. Run from the repository root with $OUT set;
# set MOK_GIT_COMMIT by hand (the device's git history may be stale).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 260 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -2 $K/suite.log
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch ring > $K/racecheck_ring.log 2>&1; echo racecheck-ring rc=$?; tail -1 $K/racecheck_ring.log
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck_gather.log 2>&1; echo racecheck-gather rc=$?; tail -1 $K/racecheck_gather.log
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
timeout 60 python3 experiments/task_timeline.py qwen3.5-397b/ep64 kimi-k2.7/ep64 > $K/timeline.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline 2>/dev/null; grep -E "span|dispatch " $K/timeline.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
