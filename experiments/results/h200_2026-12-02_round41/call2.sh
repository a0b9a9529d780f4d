# Round 41, call 2 (carrying .carry/sonic and .carry/quack_cache.tgz; experiments/results moved out of the tree, run
# from a copy at experiments/_call2.sh). First mainloop_roofline_probe's round-41 modes (which step of the store path
# keeps a deferred epilogue from overlapping the next tile's wgmma), then the one GPU test round 40 did not reach
# (test_triton_gpu.py::test_fp32_ieee_products_vs_reference_and_ep), then round 40's next_call B: anchors 3 and 5
# beside SonicMoE held at the power limit (energy_per_layer.py: 8 s runs after 3 s of rest, three repeats, the order
# alternating).
export MOK_GIT_COMMIT=ce98dd5+probe
T0=$(date +%s); K=$OUT/k; mkdir -p $K build
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -o build/mainloop_roofline_probe \
  experiments/mainloop_roofline_probe.cu; echo "probe build rc=$? +$(( $(date +%s)-T0 ))s"
for k in 1024 4096; do for e in 0 1200; do
  build/mainloop_roofline_probe 16 all 7 $k $e > $K/probe_k${k}_e${e}.log 2>&1; echo "probe k=$k e=$e rc=$?"
  grep -E "^(box|noload) |^box-st|^box-gl" $K/probe_k${k}_e${e}.log | cut -c1-100
done; done
tar czf $OUT/probe.tgz -C $OUT k && rm -rf $K
MOK_STAGES=tests,energy MOK_PYTEST_ARGS="-k test_fp32_ieee_products_vs_reference_and_ep" MOK_TIMEOUT_TESTS=120 \
  MOK_ENERGY_SHAPES="anchor-3 anchor-5 --seconds 8 --repeats 3" MOK_ENERGY_BACKENDS=cuda,sonicmoe \
  MOK_TIMEOUT_ENERGY=360 MOK_DEADLINE_S=500 bash experiments/gpu_run.sh 2>&1 | tail -40
