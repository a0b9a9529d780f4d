# Round 23, call 2 (main at 23f5ced, warm after call 1): round 22's next_call_counting_sort.sh as it stands in that folder.
bash experiments/results/h200_2026-11-30_round22/next_call_counting_sort.sh
