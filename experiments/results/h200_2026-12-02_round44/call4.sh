# Round 44, call 4: the whole GPU test suite at the round's last kernel change and notes (844ea00): every file marked gpu,
# Triton and megakernel alike (the last whole suite in one call was round 38's).
export MOK_GIT_COMMIT=844ea00
MOK_STAGES=tests MOK_TIMEOUT_TESTS=560 MOK_DEADLINE_S=575 bash experiments/gpu_run.sh 2>&1 | grep -vE "^==PROF|^\s*$" | tail -30
