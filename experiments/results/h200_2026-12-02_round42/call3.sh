# Round 42, call 3: round 41's next_call B, the first GPU run of energy_per_layer.py's switched backend entries
# (cuda+MOK_CUDA_DISPATCH=gather): the ring and gather dispatch held at the power limit in one process beside SonicMoE
# at anchor-3 (round 41's call 3 ran them as two processes: ring 4.59 J, gather 4.83 J per forward). Carries
# .carry/sonic and the quack cache; experiments/results moved out, run from a copy at experiments/_call3.sh.
export MOK_GIT_COMMIT=b3220d4
MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-3 --seconds 8 --repeats 3" \
  MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_DISPATCH=gather,sonicmoe" MOK_TIMEOUT_ENERGY=330 MOK_DEADLINE_S=400 \
  bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -30
