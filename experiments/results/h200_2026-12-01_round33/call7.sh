# Round 33, call 7 (nvidia-h200, b0ae656): the CUDA top-k in the layer: ab_layer.py --router (the bench's layer, its
# router and routing inside, a training forward, bf16 router weights as the bench keeps them), MOK_ROUTE_TOPK=triton
# against cuda, timed in rotation and compared bit for bit, at the four EP-64 slices and anchors 1-2.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 230 python3 experiments/ab_layer.py --router --env-a MOK_ROUTE_TOPK=triton \
  --env-b MOK_ROUTE_TOPK=cuda --rounds 6 qwen3.5-397b/ep64 kimi-k2.7/ep64 glm-5.2/ep64 deepseek-v4-pro/ep64 anchor-2 \
  anchor-1 > $K/ab_layer_topk.log 2>&1
echo "ab rc=$? +$(( $(date +%s)-T0 ))s"; grep -vE "^\s*$" $K/ab_layer_topk.log | tail -10 | cut -c1-220
