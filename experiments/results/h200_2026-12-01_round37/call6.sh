# Round 37, call 6 (nvidia-h200): what limits gather mode's gate/up mainloop at anchor-2 (668 TFLOP/s chip rate against
# 811 for ring mode's TMA-fed one at anchor-3, call 2)? Two probes, results garbage (the bitwise check fails by design):
#   patches/probe_gather_no_loads.patch: the producers issue no A copies at all (the stage's arrivals still happen);
#   patches/probe_gather_l2_rows.patch: tile row r copies token row r, so every tile reads the same 128 rows (L2 hits,
#     the same access pattern and instruction count as the real gather).
# If the second runs like the first, the gather's cost is DRAM latency (deeper A pipelining would help); if like
# HEAD, it is the copy path itself.
# The preamble (environment, `el`, `build_jit`, `ab`) is experiments/device_call.sh since round 37's review;
# the commands are the ones that ran.
source experiments/device_call.sh
P=experiments/results/h200_2026-12-01_round37/patches
build_jit
for c in probe_gather_no_loads probe_gather_l2_rows; do ab $c 120 --patch $P/$c.patch anchor-2 anchor-1; done
tar czf $OUT/call6.tgz -C $OUT k
