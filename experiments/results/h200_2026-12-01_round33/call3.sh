# Round 33, call 3 (nvidia-h200): the whole GPU suite with the CUDA top-k (uncommitted tree on e595405: the kernel,
# its binding, mok.route's switch MOK_ROUTE_TOPK, the Triton kernel's slot-order sum, the leaner GPU tests).
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
MOK_STAGES=tests MOK_TIMEOUT_TESTS=420 MOK_DEADLINE_S=440 bash experiments/gpu_run.sh
