# Round 40, call 5 (carrying SonicMoE, experiments/results moved out): round 39's next_call C at anchors 3 and 5
# (profile_forward.py through gpu_run.sh's fwdprofile stage, cuda and SonicMoE in one process).
export MOK_GIT_COMMIT=7b0e1d8
MOK_STAGES=fwdprofile MOK_FWDPROFILE_SHAPES="anchor-3 anchor-5" MOK_FWDPROFILE_BACKENDS=cuda,sonicmoe \
  MOK_TIMEOUT_FWDPROFILE=300 MOK_DEADLINE_S=330 bash experiments/gpu_run.sh 2>&1 | tail -40
