# Round 41, call 1: round 40's next_call A and A2. First mainloop_roofline_probe's store modes (does storing an
# epilogue's tile during the next tile's first K blocks hide it?), then held_gate_up.patch's A/B (10 rounds).
export MOK_GIT_COMMIT=ce98dd5
source experiments/device_call.sh
R40=experiments/results/h200_2026-12-02_round40
mkdir -p build
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include"
$NV -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu; el probe_build $?
$NV -DPROBE_STAGES=3 -o build/mainloop_roofline_probe3 experiments/mainloop_roofline_probe.cu; el probe3_build $?
for k in 1024 2048 4096; do for e in 0 1200; do
  build/mainloop_roofline_probe 16 all 7 $k $e > $K/probe_k${k}_e${e}.log 2>&1; el "probe k=$k e=$e" $?
  grep -E "^(box|noload) " $K/probe_k${k}_e${e}.log | cut -c1-150; grep -E "^box-store" $K/probe_k${k}_e${e}.log | cut -c1-150
done; done
build/mainloop_roofline_probe 160 all 3 2048 0 > $K/probe_k2048_e0_160.log 2>&1; el "probe 160 tiles" $?
grep -E "^box" $K/probe_k2048_e0_160.log | cut -c1-150
for k in 1024 2048 4096; do
  build/mainloop_roofline_probe3 16 all 7 $k 0 > $K/probe3_k${k}_e0.log 2>&1; el "probe3 k=$k" $?
  grep -E "^box" $K/probe3_k${k}_e0.log | cut -c1-150
done
build_jit
AB_ROUNDS=10 ab held 330 --patch $R40/held_gate_up.patch anchor-2 anchor-1 anchor-3 anchor-5 kimi-k2.7/ep64
tar czf $OUT/call1.tgz -C $OUT k
