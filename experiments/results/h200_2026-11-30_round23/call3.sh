# Round 23, call 3 (main at 23f5ced + this folder's throw_probe.py; MOK_GIT_COMMIT set by hand): (1) the throw probe at
# HEAD and with the counting-sort patch applied, with a native backtrace of the first case that crashes; (2) the layer
# bench at HEAD with SonicMoE beside it at anchors 2-5 (round 22's next_call_bench.sh); (3) the EP-64 slices with the
# routing given (--router exclude), the layer without the stand-in's router over all 16-20K rows.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K; P=experiments/results/h200_2026-11-30_round23
echo "== HEAD"; timeout 150 python3 $P/throw_probe.py 2>&1 | tee $K/throw_head.log
git apply experiments/results/h200_2026-11-30_round22/patches/counting_sort.patch
echo "== patched"; timeout 150 python3 $P/throw_probe.py 2>&1 | tee $K/throw_patched.log
GDB=$(command -v gdb || command -v cuda-gdb); echo "debugger: $GDB"
CASE=$(grep -m1 -E '^rc= *-|^rc= *1[0-9][0-9]' $K/throw_patched.log $K/throw_head.log | sed -E 's/.*rc= *-?[0-9]+ +([a-z_]+):.*/\1/')
[ -n "$GDB" ] && [ -n "$CASE" ] && timeout 120 $GDB -q -batch -ex run -ex bt -ex "info sharedlibrary" --args python3 $P/throw_probe.py $CASE > $K/gdb_$CASE.log 2>&1; [ -n "$CASE" ] && grep -E '^#[0-9]+' $K/gdb_$CASE.log | head -25
git apply -R experiments/results/h200_2026-11-30_round22/patches/counting_sort.patch
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,ep64 MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" MOK_DEADLINE_S=400 bash experiments/gpu_run.sh > $K/bench.log 2>&1; grep -E 'fwd|geomean' $K/bench.log | grep -v ERROR | tail -24
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench.tgz
MOK_STAGES=bench MOK_BENCH_SHAPES=ep64 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave --router exclude" MOK_DEADLINE_S=90 bash experiments/gpu_run.sh > $K/bench_routed.log 2>&1; grep -E 'fwd' $K/bench_routed.log | grep -v ERROR | tail -10
[ -f $OUT/gpu_results.tgz ] && mv $OUT/gpu_results.tgz $K/bench_routed.tgz
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
