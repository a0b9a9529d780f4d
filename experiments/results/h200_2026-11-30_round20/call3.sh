# Round 20, call 3: why the branch down-tma-wg-local ran slower in call 2 (its push at anchor-2 9.08 ms against
# main's 8.14 in round 19). Builds in one process: A = main c077be1, B = a tree of the branch (ab_trees/<commit>:
# 5f10366 = WG-local box layout + inverse-map check; ac84e8f = that + the shared weighted-sum loop).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=c077be1
K=$OUT/k; mkdir -p $K
ab() { name=$1; shift; timeout 150 python3 experiments/ab_kernels.py --rounds 6 "$@" > $K/ab_$name.log 2>&1; echo "$name rc=$?"; grep -E 'B/A|Error' $K/ab_$name.log; }
ab full_tma --tree ab_trees/ac84e8f --launch-a down_tma=true --launch-b down_tma=true anchor-2 anchor-1
ab full_push --tree ab_trees/ac84e8f --launch-a down_tma=false --launch-b down_tma=false anchor-2 anchor-1
ab check_tma --tree ab_trees/5f10366 --launch-a down_tma=true --launch-b down_tma=true anchor-2 anchor-1
ab ring --tree ab_trees/ac84e8f --launch-a down_tma=false --launch-b down_tma=true anchor-3 anchor-5
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
