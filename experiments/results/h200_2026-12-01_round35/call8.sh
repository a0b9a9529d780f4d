# Round 35, call 8 (nvidia-h200): is the megakernel's extra DRAM reading at anchor-5 (22 GB per forward against
# SonicMoE's 14) the weights read again in every minibatch step? One forward under ncu (forward_traffic.py) with the
# default two-wave minibatch (2,176 rows: about two experts per step), 8,192-row minibatches, and one minibatch.
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
ROOT_OUT=$OUT
for variant in ":" "_mb8192:--config minibatch_rows=8192" "_whole:--config policy=whole"; do
  tag=${variant%%:*} args=${variant#*:}
  mkdir -p "$ROOT_OUT/r$tag"
  OUT="$ROOT_OUT/r$tag" MOK_STAGES=traffic MOK_TRAFFIC_SHAPES=anchor-5 MOK_TRAFFIC_BACKENDS=cuda MOK_TRAFFIC_TAG=$tag \
    MOK_TRAFFIC_ARGS="$args" MOK_TIMEOUT_TRAFFIC=150 MOK_DEADLINE_S=170 bash experiments/gpu_run.sh 2>&1 \
    | grep -E "^\| (void mok::sm90_moe_forward|\*\*all)|stage|Error|error" | cut -c1-200 | sed "s/^/r$tag: /"
done
