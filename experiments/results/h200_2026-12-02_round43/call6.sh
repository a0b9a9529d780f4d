# Round 43, call 6: anchor-4, the one shape where clusters read faster in call 5 (0.986x the time, two 5 s runs), held
# longer: 8 s runs, three times in turn, without and with clusters, one process.
export MOK_GIT_COMMIT=51c12d2
MOK_STAGES=energy MOK_ENERGY_SHAPES="anchor-4 --seconds 8 --repeats 3" \
  MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_CLUSTERS=1" MOK_TIMEOUT_ENERGY=200 MOK_DEADLINE_S=220 \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^\| anchor|^stage"
