# Round 42, call 4: the bytes of the two dispatch modes. Call 3 held anchor-3 at the power limit: gather dispatch needs
# 4.95 J per forward against the ring's 4.65 (SonicMoE 4.36), though it skips the ring's copy. One forward's DRAM and
# L2 bytes and instructions with gather dispatch at anchor-3 (against call 1's ring), and anchor-2 (gather by
# default there) beside SonicMoE, which round 35 measured before rounds 36-40 changed the kernel. gpu_run.sh now
# prints each report beside forward_traffic.py's tile model. Carries .carry/sonic and the quack cache;
# experiments/results moved out, run from a copy at experiments/_call4.sh.
export MOK_GIT_COMMIT=b3220d4+model
SHOW="^\| \*\*all|^\| anchor|sm90_moe|quack|gather_sum|=== traffic"
MOK_CUDA_DISPATCH=gather MOK_TRAFFIC_TAG=_gather MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-3" \
  MOK_TRAFFIC_BACKENDS="cuda" MOK_TIMEOUT_TRAFFIC=200 MOK_DEADLINE_S=230 bash experiments/gpu_run.sh 2>&1 \
  | grep -E "$SHOW"
mv $OUT/gpu_results.tgz $OUT/gather.tgz
MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-2" MOK_TRAFFIC_BACKENDS="cuda sonicmoe" MOK_TIMEOUT_TRAFFIC=250 \
  MOK_DEADLINE_S=280 bash experiments/gpu_run.sh 2>&1 | grep -E "$SHOW"
mv $OUT/gpu_results.tgz $OUT/anchor2.tgz; rm -f $OUT/quack_cache.tgz
