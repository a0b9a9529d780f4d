# Round 33, call 6 (nvidia-h200): the CUDA top-k with its sorted keys in shared memory (a pop is one shared load in the
# winning lane instead of a register shift in all 32; uncommitted tree on e31b35d): its GPU tests and the
# router's, then router_topk_bench.py at the shapes of call 2.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 240 python3 -m pytest -q -m gpu tests/test_router_topk_cuda.py tests/test_router_topk.py tests/test_route.py \
  > $K/tests.log 2>&1
echo "tests rc=$? +$(( $(date +%s)-T0 ))s"; tail -3 $K/tests.log | cut -c1-200
timeout 120 python3 experiments/router_topk_bench.py --shapes 32768x256x16 24576x128x8 32768x64x4 8192x64x8 \
  2048x384x8 --iters 30 > $K/topk_bench.log 2>&1
echo "topk bench rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "softmax" $K/topk_bench.log | cut -c1-160
