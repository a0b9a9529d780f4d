# Round 22, call 2 (main at 4adbbd4, warm after call 1): round 21's next_call_ab.sh as it stands in that folder.
bash experiments/results/h200_2026-11-30_round21/next_call_ab.sh
