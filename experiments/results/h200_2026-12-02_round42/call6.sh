# Round 42, call 6: call 5's sustained comparison at the down GEMM's K: 2048 (anchors 4-5) and 1024 (anchor-3), where
# a tile has 32 or 16 K blocks and its fill and drain weigh more. Each mode 3 s, twice in turn.
export MOK_GIT_COMMIT=b3220d4+gap
source experiments/device_call.sh
mkdir -p build $OUT/results
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include -o build/mainloop_roofline_probe \
  experiments/mainloop_roofline_probe.cu; el probe_build $?
for k in 2048 1024; do
  python3 experiments/mainloop_gap.py --probe-only --seconds 3 --k $k --name mainloop_gap_round42_k$k \
    --modes box mcastB box mcastB > $K/gap_k$k.log 2>&1; el "gap k=$k" $?
  grep -E "^probe" $K/gap_k$k.log
done
cp $OUT/results/mainloop_gap_round42_*.json $OUT/results/mainloop_gap_round42_*.md $K/; rm -rf $OUT/results
tar czf $OUT/call6.tgz -C $OUT k
