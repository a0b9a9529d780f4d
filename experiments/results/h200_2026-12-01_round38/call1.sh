# Round 38, call 1: the bare-mainloop probe's modes at anchor-2's gate/up K (4096) and anchor-5's (7168), 160 tiles
# per CTA (long enough to reach the power limit). Reads cpasync-pairA (round 37's 2-CTA pair sharing the gathered A)
# against cpasync@mcastB-grid and box@mcastB-grid.
mkdir -p build "$OUT"
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
  -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu 2>&1 | tail -5
for K in 4096 7168; do
  echo "== K=$K"; timeout 200 build/mainloop_roofline_probe 160 all 7 $K 2>&1 | tee "$OUT/probe_K$K.log"
done
