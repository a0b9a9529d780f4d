# For the next GPU session (round 44). None of this has run.
#
# First, a quick check round 43 could not get a machine for (three refused starts): anchor-4, the one shape where
# clusters read faster (call 5: 0.986x the time, two 5 s runs), held longer in one process:
#   MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-4 --seconds 8 --repeats 3" \
#     MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_CLUSTERS=1" bash experiments/gpu_run.sh
#
# Round 43 wrote the megakernel in 2-CTA clusters (MOK_CUDA_CLUSTERS=1): the gate/up weights multicast in pairs, -14.2
# GB of L2 at anchor-5, +2.9-4.3% clock held at the power limit, and as much lost in work per clock (0.986-1.008x the
# time). The timelines (calls 2-3) put part of that loss in the dispatch tasks: a chip of lock-stepped pairs stays in
# step, every CTA reaches each step's dispatch group D(s+1) at once, and the ring's copies all run together beside no
# GEMM (46.8-47.5 against 42.2-42.6 us per task). The lead, written on the CPU first (not started):
#   - scheduler.cuh: with a ring of 2 or more minibatches, D(s+1)'s tasks placed among G(s)'s, evenly (entry j of the
#     merged group of n = gt + dt tickets is a dispatch iff floor((j + 1) dt / n) > floor(j dt / n); a gate/up entry's
#     index is j - floor((j + 1) dt / n)). Every dependency still points backwards: D(s+1) waits for G(s + 1 -
#     ring_slots), an earlier step. With clusters the merge goes in units of two tickets (a pair of dispatches between
#     pairs of gate/up tiles), so the padding keeps the units whole. A switch (say MOK_CUDA_SPREAD_DISPATCH; it does not
#     exist yet), its host simulation in test_cuda_compile.py (test_task_order_cannot_deadlock's launches), a bitwise
#     GPU test beside test_overlapped_steps_equal_the_plain_order_bitwise.
# Its first measurement, held at the power limit in one process, the four ways:
#   MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 anchor-5 --seconds 6 --repeats 2" \
#     MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_SPREAD_DISPATCH=1,cuda+MOK_CUDA_CLUSTERS=1,cuda+MOK_CUDA_CLUSTERS=1+MOK_CUDA_SPREAD_DISPATCH=1" \
#     bash experiments/gpu_run.sh
# (energy_per_layer.py splits an entry at every "+": backend+SWITCH=V+SWITCH=V), and the timelines
#   PYTHONPATH=. python3 experiments/task_timeline.py --dispatch ring [--clusters] anchor-3
# with the switch set in the environment. Then the megakernel's GPU test files and the sanitizer as round 43's call 4.
