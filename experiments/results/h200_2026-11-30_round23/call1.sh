# Round 23, call 1 (main at 23f5ced, MOK_GIT_COMMIT=23f5ced): round 22's next_call.sh as it stands in that folder.
bash experiments/results/h200_2026-11-30_round22/next_call.sh
