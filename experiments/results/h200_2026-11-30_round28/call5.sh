# Round 28, call 5 (nvidia-h200): the strip kernel's two-tile loop (experts of one or two tiles, G held for both;
# compiled where more than three quarters of a tile per expert are expected, e.g. glm-5.2 at EP 2 with 128 rows
# per expert, which call 4's general kernel served). GPU tests, then the wgrad_few_rows candidates (and strip 0 =
# the general kernel) at EP-2 loads of glm (128 rows per expert), kimi (85) and deepseek (64).
cp -r .carry/clean/. .
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 100 python3 -m pytest -q -p no:cacheprovider -rfEs tests/test_wgrad_strip.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 200 python3 experiments/tune_triton.py --shapes "2048,6144,2048,128,8;2048,7168,2048,192,8;2048,7168,3072,192,6" --kernels wgrad_few_rows --budget 120 --no-layer --no-torch --json $K/tune_few.json > $K/tune_few.log 2>&1; echo tune rc=$?; grep -A14 "^wgrad_few_rows (ms" $K/tune_few.log; grep -A2 "suggested defaults" $K/tune_few.log | head -3
