# Round 24, call 1 (main at a0ce4e4, MOK_GIT_COMMIT=a0ce4e4): round 23's next_call.sh as it stands in that folder.
bash experiments/results/h200_2026-11-30_round23/next_call.sh
