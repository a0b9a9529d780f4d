# Round 22, call 13 (inline, warm after call 12; main at 8b2c080 with experiments/schedule_sort_bench.py timing GPU time:
# each form captured in a CUDA graph and replayed; call 12's per-call event timing measured the host's launches).
export PYTHONPATH=$PWD; mkdir -p $OUT/k; timeout 60 python3 experiments/schedule_sort_bench.py > $OUT/k/sort_bench_graph.log 2>&1
