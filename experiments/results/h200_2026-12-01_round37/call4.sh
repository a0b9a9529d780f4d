# Round 37, call 4 (nvidia-h200): call 3's two dispatch candidates again with 16 rounds (call 3: 0.984-1.009, near the
# noise), at the ring-mode shapes where dispatch is a larger share (anchors 3-5, the qwen and kimi slices).
# The preamble (environment, `el`, `build_jit`, `ab`) is experiments/device_call.sh since round 37's review;
# the commands are the ones that ran.
AB_ROUNDS=16
source experiments/device_call.sh
P=experiments/results/h200_2026-12-01_round37/patches
build_jit
S="anchor-3 anchor-4 anchor-5 qwen3.5-397b/ep64 kimi-k2.7/ep64"
for c in dispatch_table_once dispatch_table_once_chunks16; do ab $c 220 --patch $P/$c.patch $S; done
tar czf $OUT/call4.tgz -C $OUT k
