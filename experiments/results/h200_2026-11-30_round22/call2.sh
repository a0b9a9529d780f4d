# For the next GPU session (round 22), call 2 of 2 (after next_call.sh, while the machine is warm: about 4 minutes):
# two kernel A/Bs at anchors 1-2, then the ping-pong's bitwise test with the early hand-over applied (what must pass
# before that patch is merged). Run from the repository root with $OUT set; set MOK_GIT_COMMIT by hand.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
# The kernel's ping-pong passing the turn right after its last wgmma are issued (not once they completed).
timeout 120 python3 experiments/ab_kernels.py --rounds 8 --patch experiments/results/h200_2026-11-30_round21/patches/pp_early_handover.patch anchor-2 anchor-1 > $K/ab_pp_early.log 2>&1; echo ab-pp-early rc=$?; grep -E 'B/A|Error' $K/ab_pp_early.log
# The ping-pong instantiation at 56 / 224 (spill-free there since it has its own kernel; chosen at 64 / 216 on
# timings of a kernel that held both down paths).
timeout 120 python3 experiments/ab_kernels.py --rounds 8 --patch experiments/results/h200_2026-11-30_round21/patches/pp_instance_regs_56_224.patch anchor-2 anchor-1 > $K/ab_pp_regs.log 2>&1; echo ab-pp-regs rc=$?; grep -E 'B/A|Error' $K/ab_pp_regs.log
git apply experiments/results/h200_2026-11-30_round21/patches/pp_early_handover.patch && echo applied || exit 1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs -x tests/test_cuda_gpu.py -k "ping_pong or down_tma" > $K/tests_pp_early.log 2>&1; echo pp-early-tests rc=$?; tail -2 $K/tests_pp_early.log
git apply -R experiments/results/h200_2026-11-30_round21/patches/pp_early_handover.patch
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
