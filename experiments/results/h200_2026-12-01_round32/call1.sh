# Round 32, call 1 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out):
# where SonicMoE's forward spends its time beside the megakernel's, at anchors 2 and 3 (0.84x / 0.89x in round 31):
# (1) profile_forward.py with sonicmoe as a backend: every kernel of each layer per call; (2) the megakernel's task
# timeline at the same shapes (its gate/up, down and combine shares), so each of SonicMoE's kernels has a counterpart.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
mkdir -p /tmp/sonic && tar xJf .carry/sonic/libs_base.tar.xz -C /tmp/sonic \
  && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/sonic .carry/sonic/*.whl
export QUACK_CACHE_DIR=$PWD/build/mok-cache/quack QUACK_CACHE_AUTOTUNING=1 QUACK_COMPILE_WORKERS=$(nproc)
mkdir -p $QUACK_CACHE_DIR && tar xzf .carry/quack_cache.tgz -C $QUACK_CACHE_DIR
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "setup+build rc=$? +$(( $(date +%s)-T0 ))s"
PYTHONPATH=/tmp/sonic:/tmp/sonic/nvidia_cutlass_dsl/python_packages:$PYTHONPATH timeout 330 \
  python3 experiments/profile_forward.py anchor-2 anchor-3 --backends cuda,sonicmoe --calls 6 \
  --json $K/profile_forward.json > $K/profile_forward.log 2>&1
echo "profile rc=$? +$(( $(date +%s)-T0 ))s"; grep -E "^anchor|profiled|^    " $K/profile_forward.log | cut -c1-160
timeout 120 python3 experiments/task_timeline.py anchor-2 anchor-3 > $K/timeline.log 2>&1
echo "timeline rc=$? +$(( $(date +%s)-T0 ))s"; tail -30 $K/timeline.log | cut -c1-200
cp experiments/results/task_timeline_* $K/ 2>/dev/null
tar czf $OUT/call1.tgz -C $OUT k; ls -la $OUT
