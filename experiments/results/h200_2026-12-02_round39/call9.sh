# Round 39, call 9 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out of
# the tree while it ran): profile_forward.py at anchor-2, cuda and SonicMoE in one process: each one's kernels per
# call, to set beside calls 4-5's map (round 32 did this before the sum kernel, the ping-pong's later changes and the
# CUDA top-k).
# (Review: gpu_run.sh's fwdprofile stage does the same SonicMoE setup; next time call it instead of these lines, e.g.
#  MOK_STAGES=fwdprofile MOK_FWDPROFILE_SHAPES=anchor-2 MOK_FWDPROFILE_BACKENDS=cuda,sonicmoe bash experiments/gpu_run.sh)
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=a8d641e
mkdir -p /tmp/sonic && tar xJf .carry/sonic/libs_base.tar.xz -C /tmp/sonic \
  && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/sonic .carry/sonic/*.whl
export QUACK_CACHE_DIR=$PWD/build/mok-cache/quack QUACK_CACHE_AUTOTUNING=1 QUACK_COMPILE_WORKERS=$(nproc)
mkdir -p $QUACK_CACHE_DIR && tar xzf .carry/quack_cache.tgz -C $QUACK_CACHE_DIR
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "setup+build rc=$? +$(( $(date +%s)-T0 ))s"
PYTHONPATH=/tmp/sonic:/tmp/sonic/nvidia_cutlass_dsl/python_packages:$PYTHONPATH timeout 200 \
  python3 experiments/profile_forward.py anchor-2 --backends cuda,sonicmoe --json $K/profile_forward.json \
  > $K/profile_forward.log 2>&1
echo "profile rc=$? +$(( $(date +%s)-T0 ))s"
grep -vE "Warning|warn" $K/profile_forward.log | grep -E "anchor|profiled|^ +[0-9]" | cut -c1-170 | head -40
