# For the next GPU session (round 24), call 1 (about 6 minutes on a fresh machine): the whole GPU suite at HEAD (round 23
# ran it at f8b40e4; the two-kernel counting sort of 163c797 ran its own and the schedule tables' tests, three
# sanitizers and layer A/Bs, not the whole suite), racecheck of both pipelined modes, memcheck, and the slices' forward
# profiled (what the layer runs besides the kernel now). Run from the repository root with $OUT set; set MOK_GIT_COMMIT
# by hand (the device's git history may be stale).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 260 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -2 $K/suite.log
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch ring > $K/racecheck_ring.log 2>&1; echo racecheck-ring rc=$?; tail -1 $K/racecheck_ring.log
timeout 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check --variant pipelined --dispatch gather > $K/racecheck_gather.log 2>&1; echo racecheck-gather rc=$?; tail -1 $K/racecheck_gather.log
timeout 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m mok.cuda.sanitize_check > $K/memcheck.log 2>&1; echo memcheck rc=$?; tail -1 $K/memcheck.log
timeout 100 python3 experiments/profile_forward.py qwen3.5-397b/ep64 kimi-k2.7/ep64 --backends cuda > $K/profile_forward.log 2>&1; echo prof rc=$?; grep -E "bench fwd|^ +[0-9.]+ +[0-9.]+ " $K/profile_forward.log | head -40
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
