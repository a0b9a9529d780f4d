# Round 41, call 4 (carrying .carry/sonic and the quack cache; experiments/results moved out, run from a copy at
# experiments/_call4.sh): anchors 2 and 4 beside SonicMoE held at the power limit, as call 2 ran anchors 3 and 5, so
# that all four anchors of the 1.15x target have a sustained ratio from this round's code.
export MOK_GIT_COMMIT=ce98dd5
MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-2 anchor-4 --seconds 8 --repeats 3" MOK_ENERGY_BACKENDS=cuda,sonicmoe \
  MOK_TIMEOUT_ENERGY=380 MOK_DEADLINE_S=420 bash experiments/gpu_run.sh 2>&1 | grep -E "^\| anchor|===|rc=|Error" | tail -20
rm -f $OUT/quack_cache.tgz
