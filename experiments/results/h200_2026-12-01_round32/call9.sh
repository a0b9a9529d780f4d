# Round 32, call 9 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out):
# experiments/energy_per_layer.py: each forward back to back for 4 s after 3 s of idle GPU, SM clock and power
# sampled every 50 ms: ms, MHz, W and J per call for cuda / SonicMoE / torch at anchors 2, 3 and 5, two repeats in
# alternating order.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
mkdir -p /tmp/sonic && tar xJf .carry/sonic/libs_base.tar.xz -C /tmp/sonic \
  && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/sonic .carry/sonic/*.whl
export QUACK_CACHE_DIR=$PWD/build/mok-cache/quack QUACK_CACHE_AUTOTUNING=1 QUACK_COMPILE_WORKERS=$(nproc)
mkdir -p $QUACK_CACHE_DIR && tar xzf .carry/quack_cache.tgz -C $QUACK_CACHE_DIR
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "setup+build rc=$? +$(( $(date +%s)-T0 ))s"
PYTHONPATH=/tmp/sonic:/tmp/sonic/nvidia_cutlass_dsl/python_packages:$PYTHONPATH timeout 400 \
  python3 experiments/energy_per_layer.py anchor-2 anchor-5 anchor-3 --backends cuda,sonicmoe,torch \
  --json $K/energy_per_layer.json > $K/energy.log 2>&1
echo "energy rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^\||rc=|Error|error" $K/energy.log | cut -c1-160
gzip -f $K/energy_per_layer.smi.csv 2>/dev/null; ls $K
