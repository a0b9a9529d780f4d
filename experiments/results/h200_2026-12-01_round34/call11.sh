# Round 34, call 11 (nvidia-h200): compute-sanitizer memcheck and racecheck of mok.cuda.sanitize_check, which now
# also runs the sum kernel on the pushed slots and the combine tasks through y (the sum kernel through y is the
# default with down_tma).
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton
export MOK_GIT_COMMIT=${MOK_GIT_COMMIT:-unknown}
python3 -m mok.cuda.build --jit > /dev/null 2>&1; echo "build rc=$?"
MOK_STAGES=sanitize MOK_TIMEOUT_SANITIZE=330 MOK_DEADLINE_S=360 bash experiments/gpu_run.sh 2>&1 | grep -E "rc=|ERROR SUMMARY|relative error|stage|Race|race" | cut -c1-200 | tail -60
