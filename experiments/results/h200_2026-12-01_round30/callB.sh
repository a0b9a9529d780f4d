# Round 30, call B (nvidia-h200): the backward on two streams (mok/triton_ref/backward_streams.py, uncommitted tree).
# 1. its GPU tests, and the tests that capture the training step in a CUDA graph or run it on a side stream;
# 2. a mutant without the wait before the sums over k (the test must fail);
# 3. A/B of the layer's forward + backward (router inside), one stream against two, cuda and triton.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K; T0=$(date +%s)
timeout 200 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_backward_streams.py tests/test_graph_step.py tests/test_layer_graph.py tests/test_triton_run_reuse_gpu.py > $K/tests.log 2>&1; echo "tests rc=$? +$(( $(date +%s) - T0 ))s"; tail -4 $K/tests.log
cp mok/triton_ref/pipeline.py /tmp/pipeline.py.orig
sed -i 's/streams.memory_after_gemm()  # (streams) every dx row/pass  # MUTANT/' mok/triton_ref/pipeline.py && grep -c MUTANT mok/triton_ref/pipeline.py
timeout 60 python3 -m pytest -q -x -p no:cacheprovider tests/test_backward_streams.py -k "cuda and ep1" > $K/mutant.log 2>&1; echo "mutant rc=$? (1 = caught) +$(( $(date +%s) - T0 ))s"; grep -m2 "differ\|NaN" $K/mutant.log | cut -c1-200
cp /tmp/pipeline.py.orig mok/triton_ref/pipeline.py
AB="python3 experiments/ab_layer.py --env-a MOK_BACKWARD_STREAMS=0 --env-b MOK_BACKWARD_STREAMS=1 --router --backward --rounds 4 --calls 3"
timeout 170 $AB --backend cuda anchor-2 anchor-5 anchor-1 anchor-3 qwen3.5-397b/ep64 > $K/ab_cuda.log 2>&1; echo "cuda rc=$? +$(( $(date +%s) - T0 ))s"; grep "B/A" $K/ab_cuda.log
timeout 100 $AB --backend triton anchor-2 anchor-5 > $K/ab_triton.log 2>&1; echo "triton rc=$? +$(( $(date +%s) - T0 ))s"; grep "B/A" $K/ab_triton.log
