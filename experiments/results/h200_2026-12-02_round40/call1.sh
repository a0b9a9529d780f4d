# Round 40, call 1: round 39's next_call A. First the SwiGLU epilogue's pieces alone (experiments/swiglu_epilogue_probe.cu:
# which pipe F2F and F2FP use, what the packed rounding saves per gate/up tile), then swiglu_packed_rounding.patch A/B.
export MOK_GIT_COMMIT=abd5b2d
source experiments/device_call.sh
R39=experiments/results/h200_2026-12-02_round39
mkdir -p build
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -o build/swiglu_epilogue_probe \
  experiments/swiglu_epilogue_probe.cu && build/swiglu_epilogue_probe > $K/swiglu_probe.log 2>&1; el probe $?
cat $K/swiglu_probe.log | head -30
build_jit
AB_ROUNDS=10 ab packed_rounding 300 --patch $R39/swiglu_packed_rounding.patch anchor-2 anchor-1 anchor-3 anchor-5 \
  kimi-k2.7/ep64 qwen3.5-397b/ep64
tar czf $OUT/call1.tgz -C $OUT k
