# Round 41, call 3 (carrying .carry/sonic and the quack cache call 2 returned; experiments/results moved out, run from
# a copy at experiments/_call3.sh). First mainloop_roofline_probe's serial decomposition of the store path (no wait
# between the halves, no proxy fence, and the whole tile staged in 32 KB per warpgroup with three stages), then
# anchor-3 at the power limit with the megakernel's gather dispatch against its ring (the default there) beside
# SonicMoE: call 2 found the layer's time there set by its joules per forward, and gather mode moves fewer bytes.
export MOK_GIT_COMMIT=ce98dd5+probe
T0=$(date +%s); K=$OUT/k; mkdir -p $K build
NV="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include"
$NV -o build/probe4 experiments/mainloop_roofline_probe.cu && $NV -DPROBE_STAGES=3 -o build/probe3 \
  experiments/mainloop_roofline_probe.cu; echo "probe builds rc=$? +$(( $(date +%s)-T0 ))s"
for k in 1024 2048 4096; do for b in 4 3; do
  build/probe$b 16 all 7 $k 0 > $K/probe${b}_k${k}.log 2>&1; echo "probe stages=$b k=$k rc=$?"
  grep -E "^(box|box-stage|box-store|box-store-nowait|box-store-nofence|box-store-whole|box-store-deferred) " \
    $K/probe${b}_k${k}.log | cut -c1-100
done; done
tar czf $OUT/probe.tgz -C $OUT k && rm -rf $K
MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 --seconds 8 --repeats 3" MOK_ENERGY_BACKENDS=cuda,sonicmoe \
  MOK_TIMEOUT_ENERGY=200 MOK_DEADLINE_S=220 bash experiments/gpu_run.sh 2>&1 | grep -E "^\| anchor|===|rc=" | tail -12
mv $OUT/gpu_results.tgz $OUT/ring.tgz
MOK_CUDA_DISPATCH=gather MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 --seconds 8 --repeats 3" \
  MOK_ENERGY_BACKENDS=cuda,sonicmoe MOK_TIMEOUT_ENERGY=200 MOK_DEADLINE_S=220 bash experiments/gpu_run.sh 2>&1 \
  | grep -E "^\| anchor|===|rc=" | tail -12
mv $OUT/gpu_results.tgz $OUT/gather.tgz; rm -f $OUT/quack_cache.tgz
