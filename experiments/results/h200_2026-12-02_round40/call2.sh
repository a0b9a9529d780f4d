# Round 40, call 2: the whole GPU suite and compute-sanitizer at 7b0e1d8 (the packed SwiGLU rounding in). Both stages
# hit their caps on this machine (round 38's suite took 360 s): the tests at test 380 of 404, every one passed so far;
# racecheck at variant 20 of 30. Call 3 ran the rest.
export MOK_GIT_COMMIT=7b0e1d8
MOK_STAGES=tests,sanitize MOK_TIMEOUT_TESTS=420 MOK_TIMEOUT_SANITIZE=150 MOK_DEADLINE_S=585 bash experiments/gpu_run.sh 2>&1 | tail -40
