# Round 36, call 9 (nvidia-h200, the session's last 280 s): the default policy in the layer, two_wave against
# four_wave (ab_layer.py --config-a/--config-b): the Triton pipeline's forward (it walks the same ring), then the
# cuda layer's training step (router inside, forward and backward) at anchor-3.
T0=$(date +%s)
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
timeout 110 python3 experiments/ab_layer.py --backend triton --config-a policy=two_wave --config-b policy=four_wave \
  --rounds 4 anchor-3 anchor-5 qwen3.5-397b/ep64 2>&1 | grep -E "B/A|Error|error" | cut -c1-200
echo "triton rc=$? +$(( $(date +%s)-T0 ))s"
python3 -m mok.cuda.build --jit > /dev/null 2>&1
timeout 80 python3 experiments/ab_layer.py --router --backward --config-a policy=two_wave --config-b policy=four_wave \
  --rounds 4 anchor-3 2>&1 | grep -E "B/A|Error|error" | cut -c1-200
echo "cuda rc=$? +$(( $(date +%s)-T0 ))s"
