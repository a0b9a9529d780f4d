# Round 31, call 2 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out):
# (1) experiments/rotation_probe.py: the bench's rotation in phases (alone / sonicmoe imported / built / in the
# rotation / freed) at anchor-2 and anchor-5, every call kept; (2) step_gaps at anchor-2 and anchor-5 (cuda, torch),
# whose log call 1 could not return (8 files at most: everything now comes back in one tarball).
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
mkdir -p /tmp/sonic && tar xJf .carry/sonic/libs_base.tar.xz -C /tmp/sonic \
  && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/sonic .carry/sonic/*.whl
export QUACK_CACHE_DIR=$PWD/build/mok-cache/quack QUACK_CACHE_AUTOTUNING=1 QUACK_COMPILE_WORKERS=$(nproc)
mkdir -p $QUACK_CACHE_DIR && tar xzf .carry/quack_cache.tgz -C $QUACK_CACHE_DIR
echo "setup +$(( $(date +%s)-T0 ))s"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \
  --format=csv -lms 200 > $K/smi.csv 2>&1 & SMI=$!
PYTHONPATH=/tmp/sonic:/tmp/sonic/nvidia_cutlass_dsl/python_packages:$PYTHONPATH timeout 300 \
  python3 experiments/rotation_probe.py anchor-2 anchor-5 --json $K/rotation_probe.json > $K/rotation_probe.log 2>&1
echo "rotation_probe rc=$? +$(( $(date +%s)-T0 ))s"; grep -v "^  state" $K/rotation_probe.log | tail -40; grep "^  state" $K/rotation_probe.log | cut -c1-330
kill $SMI
timeout 150 python3 experiments/step_gaps.py anchor-2 anchor-5 --backends cuda,torch --gaps 10 --json $K/step_gaps.json > $K/step_gaps.log 2>&1
echo "step_gaps rc=$? +$(( $(date +%s)-T0 ))s"; grep -A11 "cuda forward" $K/step_gaps.log | cut -c1-220
tar czf $OUT/call2.tgz -C $OUT k; ls -la $OUT
