# Round 26, call 5 (MOK_GIT_COMMIT by hand; carries .carry/sonic, with round 7's ncu report, round 19's call-4 suite
# log and the round 21-24 folders moved out of the tree for the 64 MiB limit): the router backward's GPU tests at
# call 4's grad_w tiling, then the layer bench forward and backward (router inside, its backward now the kernels),
# torch and cuda with SonicMoE at anchors 2-5, in rotation, at the anchors and the kimi slice.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_logits.py > $K/tests.log 2>&1; echo tests rc=$?; tail -1 $K/tests.log
MOK_STAGES=bench MOK_BENCH_SHAPES=anchors,kimi-k2.7/ep64 MOK_SONIC_SHAPES=anchor-2,anchor-3,anchor-4,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd,bwd --interleave" MOK_DEADLINE_S=500 bash experiments/gpu_run.sh > $K/bench.log 2>&1; echo bench rc=$?; grep -v Warn $K/bench.log | tail -40
