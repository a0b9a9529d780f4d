# For the next GPU session (round 22), call 1 of 2, about 5-6 minutes on a fresh machine (the step time-outs add up
# to 620 s: only a hung probe run would reach them): the whole GPU suite at the
# tree's HEAD (round 21's last kernel change, c31a4c3, ran the CUDA test files only), then the mainloop probe's
# ping-pong modes (written after round 21's last call; never run). The probe has no time-outs: every run has one.
# Call 2: next_call_ab.sh.
# Run from the repository root with $OUT set; set MOK_GIT_COMMIT by hand (the device's git history may be stale).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
nvidia-smi --query-gpu=name,clocks.sm,power.draw --format=csv > $K/gpu.txt
timeout 260 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -2 $K/suite.log
mkdir -p build && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -o build/probe experiments/mainloop_roofline_probe.cu && echo probe built
# K = 256: anchor-2's down block (4 K blocks); K = 4096: its gate/up tile. Epilogue ns per tile: none, the down
# block's (about 2.2 us), the gate/up task's (about 4.8 us).
for k in 256 4096; do for e in 0 2200 4800; do
  timeout 60 build/probe 16 all 7 $k $e > $K/probe_k${k}_e${e}.log 2>&1; echo "probe K=$k epilogue=$e rc=$?"
  grep -E '^(noload|box|noload-pingpong|pingpong\S*) ' $K/probe_k${k}_e${e}.log
done; done
# The grid as JSON, a table and a plot (experiments/results/ping_pong_probe_<stamp>.*, and $OUT/results).
python3 experiments/ping_pong_probe.py --from-logs $K --gpu "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" --commit "${MOK_GIT_COMMIT:-unknown}" --date "$(date -u +%F)"
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
