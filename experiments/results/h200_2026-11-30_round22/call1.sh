# Round 22, call 1 (main at 4adbbd4, MOK_GIT_COMMIT=4adbbd4): round 21's next_call.sh as it stands in that folder.
bash experiments/results/h200_2026-11-30_round21/next_call.sh
