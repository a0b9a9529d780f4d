# Round 24, call 8 (call 6's tree, carrying .carry/sonic; round 7's ncu report, round 19's call-4 suite log and this
# folder moved out of the tree for the call's 64 MiB; MOK_GIT_COMMIT set by hand): the layer bench with SonicMoE at the
# anchors, forward, interleaved. Ran into its 266 s stage limit after anchor-1 (SonicMoE's first compile at anchor-2):
# only anchor-1's torch and cuda rows came back (call8/k/bench.log). The device time was then spent.
K=$OUT/k; mkdir -p $K; MOK_STAGES=bench MOK_BENCH_SHAPES=anchors MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" MOK_DEADLINE_S=290 bash experiments/gpu_run.sh > $K/bench.log 2>&1
