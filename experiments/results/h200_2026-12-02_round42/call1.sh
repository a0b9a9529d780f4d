# Round 42, call 1: round 41's next_call A. One forward's DRAM and L2 bytes, kernel by kernel, at anchors 3 and 5,
# the megakernel beside SonicMoE's two GEMMs (Nsight Compute, experiments/forward_traffic.py), so the next candidate
# is chosen by its bytes: round 35 measured them before rounds 36-40 changed the minibatch size, the gate/up order and
# the dispatch. Carries .carry/sonic and the quack cache; experiments/results moved out, run from a copy at
# experiments/_call1.sh.
export MOK_GIT_COMMIT=b3220d4
MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-3 anchor-5" MOK_TRAFFIC_BACKENDS="cuda sonicmoe" \
  MOK_TIMEOUT_TRAFFIC=480 MOK_DEADLINE_S=540 bash experiments/gpu_run.sh 2>&1 | tail -40
