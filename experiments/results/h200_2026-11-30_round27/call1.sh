# Round 27 call 1 (was round 26 next_call.sh): one call of about 5 minutes on nvidia-h200. The routing's backward kernel
# (mok/triton_ref/router_topk_backward.py, opt-in MOK_ROUTE_BACKWARD=kernel, written after round 26's last call:
# CPU-tested, never run on a GPU): its GPU tests, the layer A/B with the bench's router inside (routing backward in
# PyTorch ops (A) against the kernel (B)), and the qwen slice's step profiled with it (round 26: 4.14 ms of host time
# for 2.25 ms of kernels). Then the router backward's layer A/B at its final grad_w tiling (c35afce; round 26's A/B
# ran before it). If the routing kernel wins, make it the default on CUDA (mok/routing.py) and run the GPU suite.
# Also first on a GPU here: the review's mends after call 8 (35f33ab): grad_w's partials summed by sum_over_k in the
# [E, splits, H] layout, and the routing forward's weights through the shared chosen_weights (same operations).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
K=$OUT/k; mkdir -p $K
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/test_router_topk_backward.py tests/test_router_topk.py tests/test_route.py tests/test_router_logits.py > $K/tests.log 2>&1; echo tests rc=$?; tail -2 $K/tests.log
timeout 120 python3 experiments/ab_layer.py --router --backward --rounds 4 --env-a MOK_ROUTE_BACKWARD=torch --env-b MOK_ROUTE_BACKWARD=kernel qwen3.5-397b/ep64 kimi-k2.7/ep64 anchor-2 > $K/ab_route_backward.log 2>&1; echo ab-route rc=$?; grep -v Warn $K/ab_route_backward.log
# The qwen backward's host time with routing given (call 7: 2.254 ms) after the host changes of 0bd7152 (plain-Python
# cdiv, remembered tile configurations: 604-653 -> 431-470 us p10 in the CPU proxy, experiments/host_profile_backward.py).
timeout 60 python3 experiments/profile_backward.py qwen3.5-397b/ep64 --backends cuda > $K/profile_backward_qwen.log 2>&1; echo profile-given rc=$?; grep "backward wall" $K/profile_backward_qwen.log
MOK_ROUTE_BACKWARD=kernel timeout 100 python3 experiments/profile_backward.py qwen3.5-397b/ep64 --router --backends cuda,torch > $K/profile_step_qwen.log 2>&1; echo profile rc=$?; grep "backward wall" $K/profile_step_qwen.log
timeout 100 python3 experiments/ab_layer.py --router --router-weights fp32 --backward --rounds 4 --env-a MOK_ROUTER_BACKWARD=torch --env-b MOK_ROUTER_BACKWARD=auto kimi-k2.7/ep64 anchor-1 anchor-2 > $K/ab_router_backward.log 2>&1; echo ab-router rc=$?; grep -v Warn $K/ab_router_backward.log
# A CUDA graph of the bench's whole training step (experiments/graph_step.py, written after the last call): what the
# host costs at the qwen slice (eager against replay, gradients compared bit for bit), or why the step cannot be
# captured.
timeout 90 python3 experiments/graph_step.py qwen3.5-397b/ep64 kimi-k2.7/ep64 --backends cuda,torch > $K/graph_step.log 2>&1; echo graph rc=$?; grep -v Warn $K/graph_step.log
