# Round 22, call 7 (kernel as at 350c981): task timelines at anchor-2 (gather; after the early hand-over) and at the two
# weakest EP-64 slices, qwen and deepseek (ring), never recorded before: where their time goes against the 650 TFLOP/s goal.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K
timeout 200 python3 experiments/task_timeline.py anchor-2 qwen3.5-397b/ep64 deepseek-v4-pro/ep64 kimi-k2.7/ep64 > $K/timeline.log 2>&1; echo tl rc=$?; mv $OUT/results $K/timeline 2>/dev/null; cat $K/timeline.log | grep -v Warn | head -60
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
