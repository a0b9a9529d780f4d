# For the next GPU session (round 37). None of this has run.
#
# Call A (nvidia-h200; SonicMoE carried as in round 35's next_call.sh): the traffic with round 36's defaults at
# anchor-5 and anchor-3, to see what the bands and four-wave minibatches did to the weights' DRAM reads (round 35:
# 22-23.5 GB per forward at anchor-5, the weights read about 3.5 times; SonicMoE 13.9 GB):
#   MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-5 anchor-3" MOK_TRAFFIC_BACKENDS=cuda MOK_TIMEOUT_TRAFFIC=300 \
#     MOK_DEADLINE_S=330 bash experiments/gpu_run.sh
#
# Call B: where the megakernel's extra instructions go at anchor-2 (1.36 G per forward against 0.90 G in SonicMoE's
# GEMMs, round 35): ncu's source counters on one launch of experiments/ncu_gemm_gap.py anchor-2 --launch.
#
# Call C: the training step (forward and backward, router inside) at anchors 3 and 5 with the four-wave default, torch
# / triton / cuda: the Triton pipeline walks the same ring and its time with the new default has not been measured
# (the policy never changes results; tests/test_determinism.py):
#   MOK_STAGES=bench MOK_BENCH_SHAPES=anchor-3,anchor-5 MOK_BENCH_ARGS="--backends torch,triton,cuda --passes fwd,bwd \
#     --interleave" bash experiments/gpu_run.sh
