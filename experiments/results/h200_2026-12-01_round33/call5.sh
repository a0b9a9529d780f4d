# Round 33, call 5 (nvidia-h200, carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results/ moved out):
# energy per forward (gpu_run.sh's energy stage) at anchor-4 (cuda / SonicMoE / torch) and at the kimi and qwen EP-64
# slices (cuda / torch: SonicMoE has no slice), so every target shape has its clock and work per clock.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=energy MOK_ENERGY_SHAPES=anchor-4 MOK_ENERGY_BACKENDS=cuda,sonicmoe,torch MOK_DEADLINE_S=260 \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^\||stage|rc=" | cut -c1-160
mkdir -p $OUT/anchor4 && cp build/gpu_out/results/energy_per_layer.* $OUT/anchor4/ 2>/dev/null
MOK_STAGES=energy MOK_ENERGY_SHAPES="kimi-k2.7/ep64 qwen3.5-397b/ep64" MOK_ENERGY_BACKENDS=cuda,torch MOK_DEADLINE_S=200 \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^\||stage|rc=" | cut -c1-160
mkdir -p $OUT/slices && cp build/gpu_out/results/energy_per_layer.* $OUT/slices/ 2>/dev/null
gzip -f $OUT/*/energy_per_layer.smi.csv 2>/dev/null; rm -f $OUT/gpu_results.tgz $OUT/quack_cache.tgz; ls -R $OUT
