# Round 34, call 7 (nvidia-h200, warm after call 6; direct command, 2331a76): the bench's forward at anchors 1-5,
# torch / cuda in rotation, router inside (../bench_20261201-112731.*). No SonicMoE: this checkout has no carried
# quack cache, and compiling SonicMoE's GEMMs takes about 7 minutes of device time for the first shape.
export MOK_GIT_COMMIT=2331a76; MOK_STAGES=bench MOK_BENCH_SHAPES=anchor-1,anchor-2,anchor-3,anchor-4,anchor-5 MOK_TIMEOUT_BENCH=380 MOK_DEADLINE_S=400 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd --interleave" bash experiments/gpu_run.sh 2>&1 | grep -E "^anchor|^geomean|stage|Wrote|bench_" | cut -c1-180
