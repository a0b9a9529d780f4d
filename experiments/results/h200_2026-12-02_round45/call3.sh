# Round 45, call 3 at 479adb0: clusters held at the power limit at the EP-64 slices. Call 2 (and rounds 43-44) put
# clusters alone at 0.983-0.999x the plain kernel's time at anchors 3-5 held; round 43 had 1.008x at the kimi slice
# (one call). Before clusters can be a default, every ring-mode slice, three 5 s runs each, in turn, one process.
export MOK_GIT_COMMIT=479adb0
MOK_STAGES=energy MOK_ENERGY_SHAPES="qwen3.5-397b/ep64 glm-5.2/ep64 deepseek-v4-pro/ep64 kimi-k2.7/ep64 --seconds 5 --repeats 3 --rest 2" \
  MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_CLUSTERS=1" \
  MOK_TIMEOUT_ENERGY=330 MOK_DEADLINE_S=340 bash experiments/gpu_run.sh 2>&1 | grep -E "^\| |^stage|rror"
