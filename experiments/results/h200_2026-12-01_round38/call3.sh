# Round 38, call 3: (1) probes at anchor-2 (gather mode, where the down tasks run at 522 TFLOP/s chip rate against the
# gate/up's 668, 4.25 us per 128 x 256 block against about 2.3 us of tensor work): the down epilogue's global stores
# removed (probe bit stores = 16; results garbage) and every GEMM epilogue removed (ablate epilogue = 8); (2)
# suspend_hint.patch: the mbarrier waits' slow path asks try_wait for a 1 ms suspend-time hint (fewer spin
# instructions; round 37/38's source counters: the spin is 10-28% of the executed instructions) at four shapes.
source experiments/device_call.sh
R=experiments/results/h200_2026-12-01_round38
build_jit
ab stores_probe 80 --launch-b ablate=16 anchor-2
ab epilogue_probe 80 --launch-b ablate=8 anchor-2
ab suspend 200 --patch $R/suspend_hint.patch anchor-2 anchor-3 kimi-k2.7/ep64 qwen3.5-397b/ep64
tar czf $OUT/call3.tgz -C $OUT k
