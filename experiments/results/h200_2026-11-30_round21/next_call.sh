# For the next GPU session (round 22), one call of about 6-8 minutes on a fresh machine (each step has a time-out;
# together they may exceed 600 s if steps run into them): the whole GPU suite at the
# tree's HEAD (round 21's last kernel change, c31a4c3, ran the CUDA test files only), then the mainloop probe's
# ping-pong modes (written after round 21's last call; never run). The probe has no time-outs: every run has one.
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
# The kernel's ping-pong passing the turn right after its last wgmma are issued (not once they completed).
timeout 120 python3 experiments/ab_kernels.py --rounds 8 --patch experiments/results/h200_2026-11-30_round21/patches/pp_early_handover.patch anchor-2 anchor-1 > $K/ab_pp_early.log 2>&1; echo ab-pp-early rc=$?; grep -E 'B/A|Error' $K/ab_pp_early.log
# The ping-pong instantiation at 56 / 224 (spill-free there since it has its own kernel; chosen at 64 / 216 on
# timings of a kernel that held both down paths).
timeout 120 python3 experiments/ab_kernels.py --rounds 8 --patch experiments/results/h200_2026-11-30_round21/patches/pp_instance_regs_56_224.patch anchor-2 anchor-1 > $K/ab_pp_regs.log 2>&1; echo ab-pp-regs rc=$?; grep -E 'B/A|Error' $K/ab_pp_regs.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
