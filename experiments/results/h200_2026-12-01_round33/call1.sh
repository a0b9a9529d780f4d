# Round 33, call 1 (nvidia-h200, no code change): (1) round 32's call A: gather mode against ring mode at anchors 3-4
# (ab_kernels.py, one build launched two ways, interleaved, bitwise compared; clock sampled); (2) the energy stage's
# settle window, small (anchor-2, cuda / torch), since neither had run on a GPU.
T0=$(date +%s); K=$OUT/k; mkdir -p $K
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > $K/build.log 2>&1; echo "build rc=$? +$(( $(date +%s)-T0 ))s"
timeout 300 python3 experiments/ab_kernels.py --launch-a dispatch=ring --launch-b dispatch=gather --rounds 8 \
  --clock-log $K/ab_clock.log anchor-3 anchor-4 > $K/ab_gather.log 2>&1
echo "ab rc=$? +$(( $(date +%s)-T0 ))s"; grep -vE "^\s*$" $K/ab_gather.log | tail -14 | cut -c1-200
MOK_STAGES=energy MOK_ENERGY_SHAPES=anchor-2 MOK_ENERGY_BACKENDS=cuda,torch timeout 150 bash experiments/gpu_run.sh \
  > $K/energy_stage.log 2>&1
echo "energy stage rc=$? +$(( $(date +%s)-T0 ))s"; tail -16 $K/energy_stage.log | cut -c1-200
gzip -f $K/ab_clock.log 2>/dev/null
tar czf $OUT/call1.tgz -C $OUT k; ls $OUT
