# Round 35, calls 5-6 (nvidia-h200; .carry/sonic and .carry/quack_cache.tgz carried): one bench forward of each layer
# under Nsight Compute (experiments/forward_traffic.py): DRAM and L2 bytes, SM clock, instructions per kernel.
# Call 5's archive (four .ncu-rep files, 17 MB) was too large to come back and its summaries failed on ncu's "ns"
# unit; call 6 summarized the reports left on the warm machine (the command below), and gpu_run.sh's traffic stage
# now keeps the reports on the machine.
MOK_GIT_COMMIT=1283c16+traffic MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-2 anchor-3" \
  MOK_TRAFFIC_BACKENDS="cuda sonicmoe" MOK_TIMEOUT_TRAFFIC=420 MOK_DEADLINE_S=450 bash experiments/gpu_run.sh
# call 6:
mkdir -p $OUT/t; for r in build/gpu_out/results/traffic_*.ncu-rep; do n=$(basename $r .ncu-rep)
  python3 experiments/forward_traffic.py ${n#traffic_} --report $r --json $OUT/t/$n.json > $OUT/t/$n.md 2>&1
  ncu --import $r --page raw --csv --print-units base > $OUT/t/$n.csv 2>&1; done
