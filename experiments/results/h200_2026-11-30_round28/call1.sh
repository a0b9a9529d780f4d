# Round 28, call 1 (nvidia-h200): round 27's next_call.sh call A (the wgrad TMA store, never run on a GPU), widened:
# the wgrad candidates at anchor-2 too, and the dx and down-dgrad candidates at anchor-2 (I = 256: dx's K is 512,
# and round 27's call 5 had dx at 335 TFLOP/s there, 6.56 of 21.2 ms) and anchor-5.
# A helper was editing swiglu.py in the working tree: the call runs HEAD's files (.carry/clean, git archive).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_triton_gpu.py tests/test_triton_run_reuse_gpu.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 200 python3 experiments/tune_triton.py --shapes "2048,7168,2048,192,8;anchor-2;anchor-5;qwen3.5-397b/ep64" --kernels wgrad --budget 120 --no-layer --no-torch --json $K/tune_wgrad.json > $K/tune_wgrad.log 2>&1; echo tune wgrad rc=$?; grep -A20 "^wgrad (ms" $K/tune_wgrad.log; grep -A3 "suggested defaults" $K/tune_wgrad.log
timeout 150 python3 experiments/tune_triton.py --shapes "anchor-2;anchor-5" --kernels dx_dgrad,down_dgrad_swiglu --budget 90 --no-layer --no-torch --json $K/tune_dgrad.json > $K/tune_dgrad.log 2>&1; echo tune dgrad rc=$?; grep -B2 -A30 "^stages" $K/tune_dgrad.log | head -60; grep -A12 "^dx_dgrad (ms\|^down_dgrad_swiglu (ms" $K/tune_dgrad.log; grep -A3 "suggested defaults" $K/tune_dgrad.log
