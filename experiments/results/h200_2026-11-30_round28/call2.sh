# Round 28, call 2 (nvidia-h200), at 4cb8fd3 (.carry/clean: git archive of that commit).
# 1. GPU tests: the wgrad strip kernel (new), swiglu.py's TMA loads (new, on the GPU), the Triton GPU suite.
# 2. The wgrad strip candidates at two EP-2 loads with ~80-85 rows per expert (kimi: 2048 tokens x 8 over 192
#    experts; qwen: 2048 x 10 over 256) and at anchor-5 (2048 rows per expert: the strip kernel must not be taken).
# 3. dx's 128 x 128 blocks at more reduction depths (anchor-1 K = 512, anchor-3 and qwen K = 2048, kimi K = 4096),
#    to place the threshold (call 1: 1.32x at K = 512, 0.98x at K = 4096).
# 4. swiglu.py's TMA candidates (down dgrad, gate/up) at anchor-2, anchor-5 and the kimi slice.
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 100 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_wgrad_strip.py tests/test_swiglu_tma.py > $K/tests_new.log 2>&1; echo new tests rc=$?; tail -3 $K/tests_new.log
timeout 90 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_triton_gpu.py > $K/tests.log 2>&1; echo triton gpu tests rc=$?; tail -2 $K/tests.log
timeout 150 python3 experiments/tune_triton.py --shapes "2048,7168,2048,192,8;2048,4096,1024,256,10;anchor-5" --kernels wgrad --budget 80 --no-layer --no-torch --json $K/tune_wgrad.json > $K/tune_wgrad.log 2>&1; echo tune wgrad rc=$?; grep -A24 "^wgrad (ms" $K/tune_wgrad.log | head -24; grep -A2 "suggested defaults" $K/tune_wgrad.log | head -3
timeout 100 python3 experiments/tune_triton.py --shapes "anchor-1;anchor-3;qwen3.5-397b/ep64;kimi-k2.7/ep64" --kernels dx_dgrad --budget 50 --no-layer --no-torch --json $K/tune_dx.json > $K/tune_dx.log 2>&1; echo tune dx rc=$?; grep -A10 "^dx_dgrad (ms" $K/tune_dx.log
timeout 130 python3 experiments/tune_triton.py --shapes "anchor-2;anchor-5;kimi-k2.7/ep64" --kernels down_dgrad_swiglu,gate_up_swiglu --budget 70 --no-layer --no-torch --json $K/tune_swiglu.json > $K/tune_swiglu.log 2>&1; echo tune swiglu rc=$?; grep -A8 "^down_dgrad_swiglu (ms\|^gate_up_swiglu (ms" $K/tune_swiglu.log; grep -A3 "suggested defaults" $K/tune_swiglu.log | head -4
