# Round 20, call 5 (main f145ed7 = c077be1 + the WG-local box layout): timing bounds from two ablation patches (not
# correct kernels, timing only): the down task's full drain of its TMA stores (wait until read instead of until
# written), and the gate/up epilogue's h stores (staged, not stored: what a free TMA store would give).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=f145ed7
K=$OUT/k; mkdir -p $K; R=experiments/results/h200_2026-11-30_round20
ab() { name=$1; shift; timeout 150 python3 experiments/ab_kernels.py --rounds 6 "$@" > $K/ab_$name.log 2>&1; echo "$name rc=$?"; grep -E 'B/A|Error' $K/ab_$name.log; }
ab drain --patch $R/patches/ablate_drain_read_only.patch anchor-2 anchor-1
ab hstore --patch $R/patches/ablate_h_store.patch anchor-2 anchor-1 anchor-3 kimi-k2.7/ep64
ab stores --launch-a ablate=0 --launch-b ablate=16 anchor-2 anchor-3
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
