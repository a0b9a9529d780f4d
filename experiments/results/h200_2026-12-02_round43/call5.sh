# Round 43, call 5: does the cluster kernel move the bytes it should? One forward's L2 and DRAM bytes in clusters at
# anchor-5 under Nsight Compute (round 42, call 1, without clusters: 100.2 GB of L2 in the GEMMs, 30.1 of them the
# gate/up weights, which pairs read half as often). Then the kimi slice and anchor-4 held at the power limit without
# and with clusters (calls 1 and 3 did anchors 3 and 5).
export MOK_GIT_COMMIT=0821e41
SHOW="^\| \*\*all|^\| anchor|sm90_moe|^stage"
MOK_CUDA_CLUSTERS=1 MOK_TRAFFIC_TAG=_clusters MOK_STAGES=traffic MOK_TRAFFIC_SHAPES="anchor-5" MOK_TRAFFIC_BACKENDS="cuda" \
  MOK_TIMEOUT_TRAFFIC=200 MOK_DEADLINE_S=220 bash experiments/gpu_run.sh 2>&1 | grep -E "$SHOW"
mv $OUT/gpu_results.tgz $OUT/traffic.tgz
MOK_STAGES=energy MOK_ENERGY_SHAPES="kimi-k2.7/ep64 anchor-4 --seconds 5 --repeats 2" \
  MOK_ENERGY_BACKENDS="cuda,cuda+MOK_CUDA_CLUSTERS=1" MOK_TIMEOUT_ENERGY=170 MOK_DEADLINE_S=190 \
  bash experiments/gpu_run.sh 2>&1 | grep -E "^\| (anchor|kimi)|^stage"
