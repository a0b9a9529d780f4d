# Round 37, call 3 (nvidia-h200): call 2's timeline at anchor-3 gives the dispatch tasks 8.3% of the SMs' time, 50.6 us
# per 128-row task (1 MB moved: about 20 GB/s per SM), latency-bound: each warp's pass waits for its rows' table
# entries, then for the rows (64 KB in flight per SM). Candidates (ring-mode shapes):
#   patches/dispatch_table_once.patch: each warp looks its rows' sources up once per task (lane k, row k), then
#     shuffles them out;
#   patches/dispatch_table_once_chunks16.patch: that, and 16 chunks per lane (twice the bytes in flight).
# The preamble (environment, `el`, `build_jit`, `ab`) is experiments/device_call.sh since round 37's review;
# the commands are the ones that ran.
source experiments/device_call.sh
P=experiments/results/h200_2026-12-01_round37/patches
build_jit
S="anchor-3 anchor-4 anchor-5 qwen3.5-397b/ep64 deepseek-v4-pro/ep64 kimi-k2.7/ep64 glm-5.2/ep64"
for c in dispatch_table_once_chunks16 dispatch_table_once; do ab $c 200 --patch $P/$c.patch $S; done
tar czf $OUT/call3.tgz -C $OUT k
