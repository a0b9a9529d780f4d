# Round 32, call 10 (nvidia-h200): energy_per_layer.py after its fix (the clock log read once the sampler stopped),
# anchor-2, cuda and torch, two repeats of 3 s after 2 s of rest.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
python3 -m mok.cuda.build --jit > /dev/null 2>&1
timeout 120 python3 experiments/energy_per_layer.py anchor-2 --backends cuda,torch --repeats 2 --seconds 3 --rest 2 \
  --json $OUT/energy_check.json --plot $OUT/energy_check.png 2>&1 | tail -12
