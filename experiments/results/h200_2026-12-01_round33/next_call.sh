# For the next GPU session (round 34). SonicMoE calls carry .carry/sonic (54 MB) and .carry/quack_cache.tgz (1.6 MB,
# outside git), with experiments/results/ moved out of the working tree while they run (64 MiB per call).
#
# Call A (nvidia-h200, about 4 minutes): energy per forward at the glm and deepseek EP-64 slices (rounds 32-33 have
# anchors 2-5 and the kimi and qwen slices; SonicMoE is not run at the slices, as in the bench):
#   MOK_STAGES=energy MOK_ENERGY_SHAPES="glm-5.2/ep64 deepseek-v4-pro/ep64" MOK_ENERGY_BACKENDS=cuda,torch \
#     bash experiments/gpu_run.sh
#
# Call B (nvidia-h200): the whole GPU suite takes 344 s now (round 33):
#   MOK_STAGES=tests MOK_DEADLINE_S=440 bash experiments/gpu_run.sh
#
# Leads (mok/cuda/README.md, "What is left"): anchor-2's gate/up mainloop (671 TFLOP/s chip rate while in it, the
# producer's cp.async row gathers beside wgmma) and tail; anchor-3's down tasks (3.5 us of each 14.8 us after the
# mainloop, ring mode); B multicast in 2-CTA clusters for energy per FLOP at the large shapes; the backward (0.66 /
# 0.83 / 0.86x SonicMoE at anchors 2 / 3 / 5). The CUDA top-k is issue-bound (963 GB/s of logits at anchor-2):
# two rows per warp might bring it under the Triton kernel at 64 experts too.
