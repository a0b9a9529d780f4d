# Round 34, call 9 (nvidia-h200, fresh machine; 2331a76): energy per forward with the new defaults at anchors 2-3,
# cuda only (each forward back to back for 4 s after 3 s of rest, two runs).
export MOK_GIT_COMMIT=2331a76; MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-2 anchor-3" MOK_ENERGY_BACKENDS=cuda MOK_TIMEOUT_ENERGY=200 MOK_DEADLINE_S=230 bash experiments/gpu_run.sh 2>&1 | tail -22 | cut -c1-200
