# Round 38, call 2: where the EP-64 slices lose (the 650 TFLOP/s target is 1-2% away at kimi, glm and deepseek, 14%
# at qwen). (1) The task timeline at the kimi, qwen and deepseek slices (experiments/task_timeline.py; kimi's last
# was round 15's). (2) Nsight Compute's source counters at the kimi slice (the ring kernel), built with -lineinfo,
# for experiments/ncu_source_lines.py here.
export MOK_CUDA_LINEINFO=1
source experiments/device_call.sh
build_jit
timeout 150 python3 experiments/task_timeline.py kimi-k2.7/ep64 qwen3.5-397b/ep64 deepseek-v4-pro/ep64 \
  > $K/timeline.log 2>&1; el timeline $?
grep -v "^ *$" $K/timeline.log | tail -60 | cut -c1-220
cp experiments/results/task_timeline_kimi* experiments/results/task_timeline_qwen* experiments/results/task_timeline_deepseek* $K/ 2>/dev/null
mkdir -p build/ncu
timeout 240 ncu --clock-control none --nvtx --nvtx-include "profile/" -k regex:sm90_moe_forward --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source yes -f -o build/ncu/source_counters \
  python3 experiments/ncu_gemm_gap.py kimi-k2.7/ep64 --launch > $K/ncu_run.log 2>&1; el ncu $?
tail -3 $K/ncu_run.log
ncu -i build/ncu/source_counters.ncu-rep --page source --csv --print-source sass | gzip > $K/ncu_source_sass_kimi.csv.gz
el sass $?
tar czf $OUT/call2.tgz -C $OUT k
