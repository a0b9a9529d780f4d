# Round 39, call 2 (round 38's next_call C): Nsight Compute's memory counters of the megakernel at anchor-2 (ring,
# gather, mainloop only) and torch._grouped_mm on the same rows. Call 1 took 17% of the down blocks' wgmma operand reads
# out of shared memory (row halves) and gained 0.2%: is the L2 (the fabric from L2 to the SMs) the limit instead?
# (Its first run wrote the report under build/, which ncu refused; /tmp now.) Kernel-wide numbers (the down blocks run beside gate/up tasks), with the shared-memory and L2 metrics this ncu knows.
export MOK_GIT_COMMIT=2fc9f46
source experiments/device_call.sh
build_jit
known=$(ncu --query-metrics --chip gh100 2>/dev/null | awk '{print $1}')
echo "$known" | grep -E "^(l1tex__data_bank|l1tex__data_pipe_lsu_wavefronts_mem_shared|lts__t_(sectors|bytes)$|lts__d_|sm__pipe_shared|smsp__inst_executed_pipe_uniform|l1tex__m_|sm__memory_throughput|lts__throughput|l1tex__throughput|sm__pipe_tensor)" > $K/metric_names.txt
extra=$( { grep -E "^(l1tex__data_bank_reads|l1tex__data_bank_writes|l1tex__data_pipe_lsu_wavefronts_mem_shared|l1tex__data_pipe_lsu_wavefronts_mem_shared_op_gmma|l1tex__m_xbar2l1tex_throughput|l1tex__m_l1tex2xbar_throughput|lts__t_sectors|lts__t_bytes|sm__pipe_shared_cycles_active|lts__throughput|l1tex__throughput|sm__memory_throughput)$" $K/metric_names.txt | sed "s/$/.avg.pct_of_peak_sustained_elapsed/";
           echo "$known" | grep -E "^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active$" | sed "s/$/.ratio/";
           echo "$known" | grep -E "^sm__pipe_tensor_op_(gmma|hmma)_cycles_active$" | sed "s/$/.avg.pct_of_peak_sustained_active/"; } | paste -sd, -)
echo "extra: $extra" > $K/extra.txt
timeout 420 ncu --clock-control none --nvtx --nvtx-include "profile/" --section SpeedOfLight \
  --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section ComputeWorkloadAnalysis \
  ${extra:+--metrics "$extra"} -f -o /tmp/ncu_a2 python3 experiments/ncu_gemm_gap.py anchor-2 --launch \
  > $K/ncu.log 2>&1; el ncu $?
ncu -i /tmp/ncu_a2.ncu-rep --page details --csv > $K/details.csv 2>&1
python3 experiments/ncu_gemm_gap.py anchor-2 --report /tmp/ncu_a2.ncu-rep > $K/summary.md 2>&1
cut -c1-400 $K/summary.md
python3 - <<'PY'
import csv, os
K = os.environ.get("K") or os.path.join(os.environ["OUT"], "k")
want = ("xbar", "l1tex__data_bank", "lsu_wavefronts_mem_shared", "lts__t_", "sm__pipe_shared", "throughput.avg", "Shared Memory",
        "L2 Cache Throughput", "L1/TEX Cache Throughput", "Mem Busy", "Max Bandwidth", "Mem Pipes Busy", "gmma")
for r in csv.DictReader(open(f"{K}/details.csv")):
    m = r.get("Metric Name", "")
    if any(w in m for w in want):
        print(r.get("ID"), r.get("Kernel Name", "")[:40], "|", m, "=", r.get("Metric Value"), r.get("Metric Unit"))
PY
gzip -f $K/details.csv
tar czf $OUT/call2.tgz -C $OUT k
