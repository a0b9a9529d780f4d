# Round 33, call 2 (nvidia-h200): the CUDA top-k (mok/cuda/csrc/router_topk.cu, uncommitted tree on e595405):
# (1) its GPU tests and the router's (ids against a stable sort and the Triton kernel, weights bit for bit, mok.route
# with either kernel); (2) router_topk_bench.py: GPU time against the Triton kernel at the anchors' routers;
# (3) profile_forward.py at anchors 1-2 (cuda): the layer's kernels with the CUDA top-k in the route.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"; tail -3 $K/build.log
timeout 200 python3 -m pytest -q -m gpu tests/test_router_topk_cuda.py tests/test_router_topk.py tests/test_route.py \
  tests/test_router_topk_backward.py > $K/tests.log 2>&1
echo "tests rc=$? +$(( $(date +%s)-T0 ))s"; tail -8 $K/tests.log | cut -c1-220
timeout 150 python3 experiments/router_topk_bench.py --shapes 32768x256x16 24576x128x8 32768x64x4 8192x64x8 \
  2048x384x8 --iters 30 > $K/topk_bench.log 2>&1
echo "topk bench rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "kernel|torch.topk" $K/topk_bench.log | cut -c1-160
timeout 150 python3 experiments/profile_forward.py anchor-2 anchor-1 --backends cuda --calls 6 \
  --json $K/profile_forward.json > $K/profile_forward.log 2>&1
echo "profile rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor|profiled|^ +[0-9.]+ +[0-9.]+ " $K/profile_forward.log | cut -c1-150 | head -30
tar czf $OUT/call2.tgz -C $OUT k; ls $OUT
