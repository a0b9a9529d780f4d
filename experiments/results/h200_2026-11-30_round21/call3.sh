# Round 21, call 3: is the 64/216 register split's ring-mode cost real (main, more rounds, the ring shapes), and what
# does ping-pong cost at 56/224 (its producer spills 4 bytes there)?
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
P=experiments/results/h200_2026-11-30_round20/patches; R=experiments/results/h200_2026-11-30_round21/patches
K=$OUT/k; mkdir -p $K
BASE=$(git rev-parse --short HEAD 2>/dev/null || echo main)
MOK_GIT_COMMIT=$BASE+regs timeout 200 python3 experiments/ab_kernels.py --rounds 8 --patch $P/regs_64_216.patch anchor-5 anchor-3 anchor-4 kimi-k2.7/ep64 qwen3.5-397b/ep64 > $K/ab_regs_ring.log 2>&1; echo regs rc=$?; grep -E 'B/A|Error|skipped' $K/ab_regs_ring.log
git apply $P/down_ping_pong.patch && echo applied || exit 1
export MOK_GIT_COMMIT=$BASE+down_ping_pong
timeout 200 python3 experiments/ab_kernels.py --rounds 8 --patch $R/pp_regs_56_224.patch anchor-2 anchor-1 anchor-5 anchor-3 > $K/ab_pp_regs.log 2>&1; echo pp-regs rc=$?; grep -E 'B/A|Error|skipped' $K/ab_pp_regs.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
