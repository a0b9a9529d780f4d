# Round 20, call 4 (main c077be1; no code change): the early combine again now that down_tma frees the consumers
# sooner (gather, anchors 2 and 1); ring mode with down_tma and a wider down span (anchors 3 and 5); the anchor-2
# task timeline at HEAD (down_tma on).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 MOK_GIT_COMMIT=c077be1
K=$OUT/k; mkdir -p $K
ab() { name=$1; shift; timeout 150 python3 experiments/ab_kernels.py --rounds 6 "$@" > $K/ab_$name.log 2>&1; echo "$name rc=$?"; grep -E 'B/A|Error' $K/ab_$name.log; }
ab early --prepare early_combine=1 --launch-a early_combine=0 --launch-b early_combine=1 anchor-2 anchor-1
ab ring_span2 --launch-a down_tma=false --launch-b down_tma=true --launch-b down_span=2 anchor-3 anchor-5
ab ring_span4 --launch-a down_tma=false --launch-b down_tma=true --launch-b down_span=4 anchor-3 anchor-5
timeout 120 python3 experiments/task_timeline.py anchor-2 > $K/timeline.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline 2>/dev/null; grep -iE "down|gate|combine|tail" $K/timeline.log | head -12
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
