# Round 24, call 2 (main at a0ce4e4 + round 23's patches/sort_all_slots.patch, MOK_GIT_COMMIT=a0ce4e4): round 23's
# next_call_sort_all_slots.sh as it stands in that folder (it applies the patch and reverts it).
bash experiments/results/h200_2026-11-30_round23/next_call_sort_all_slots.sh
