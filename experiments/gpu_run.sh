#!/usr/bin/env bash
# The one script for the H200 machine: set up, then run the selected stages, each time-bounded, and print a
# short summary table last. Runs from the repository root with $OUT set (results and logs go there too).
#
#   bash experiments/gpu_run.sh                      # stages from $MOK_STAGES (default: tests,bench,notebooks,train)
#   MOK_STAGES=bench bash experiments/gpu_run.sh     # one stage
#   bash experiments/gpu_run.sh tests bench          # stages as arguments
#
# Stages
#   tests      python3 -m pytest -q -m gpu tests/            (every GPU test of every helper)
#   bench      python3 -m mok.bench: $MOK_BENCH_SHAPES (default anchors,ep64), fwd+bwd, every backend that runs
#   cuda       the SM90 megakernel: JIT build, smoke check, tests/test_cuda_gpu.py, kernel timing ($MOK_CUDA_BENCH)
#   sanitize   compute-sanitizer memcheck and racecheck on one small megakernel forward
#   breakdown  experiments/cuda_breakdown.py: megakernel layer time split (schedule, prep, kernel, comm not hidden)
#   tune       experiments/tune_triton.py: Triton per-stage times and candidate tile configs
#   ncu        experiments/ncu_gemm_gap.py under Nsight Compute at $MOK_NCU_SHAPE (default anchor-4): megakernel
#              ring / gather / mainloop-only and torch._grouped_mm, key counters as a table
#   mvalidate  issue #6: torchrun validate on 1..N GPUs of this machine (bitwise across GPU counts)
#   mbench     issue #6: torchrun bench on all GPUs ($MOK_MBENCH_ARGS, $MOK_MBENCH_TAG)
#   ab         experiments/ab_kernels.py $MOK_AB_ARGS (two megakernel builds, or one build launched two ways,
#              interleaved, bitwise compared)
#   ablayer    experiments/ab_layer.py $MOK_ABLAYER_ARGS (the whole layer under two settings of MOK_* switches, in
#              rotation, bitwise compared: host costs included)
#   fwdprofile experiments/profile_forward.py --sync-debug at $MOK_FWDPROFILE_SHAPES, backends
#              $MOK_FWDPROFILE_BACKENDS (default cuda,torch; sonicmoe as for energy): the bench's forward (router,
#              autograd) against no_grad and no router, its kernels per call and the GPU's idle gaps (all of it
#              kept in results/profile_forward.json)
#   profile    experiments/profile_backward.py --sync-debug at $MOK_PROFILE_SHAPES: host vs kernel time of a backward
#   roofline   experiments/mainloop_roofline_probe.cu and experiments/mainloop_gap.py: the bare GEMM mainloop (loads
#              by TMA, cp.async gather, 2-CTA multicast, none) and the megakernel, with the SM clock and power
#              ($MOK_ROOFLINE_SHAPES, default "anchor-5 kimi-k2.7/ep64")
#   pushstore  experiments/push_store_probe.cu: a down tile's 64 KB pushed to scattered rows by 256 consumer threads,
#              2 or 4 store warps, all warps or bulk copies, alone (anchor-2's sizes; $MOK_PUSHSTORE_ARGS)
#   timeline   experiments/task_timeline.py $MOK_TIMELINE_ARGS at $MOK_TIMELINE_SHAPES (default "anchor-2 anchor-5
#              kimi-k2.7/ep64"): the megakernel's task timeline, per kind of task its share of the SMs' time, rate,
#              dependency waits, and the tail
#   energy     experiments/energy_per_layer.py at $MOK_ENERGY_SHAPES (default "anchor-2 anchor-5"), backends
#              $MOK_ENERGY_BACKENDS (default cuda,torch; naming sonicmoe unpacks it, with .carry/sonic carried; an
#              entry like cuda+MOK_CUDA_DISPATCH=gather runs the backend under that switch): each forward back to
#              back from a rested GPU with the SM clock and power sampled: ms, MHz, W and J per forward
#   ncusrc     Nsight Compute's source counters (per SASS instruction, gzipped CSV) of the megakernel's ring and
#              gather launches at $MOK_NCU_SHAPE (default anchor-2); experiments/ncu_source_lines.py reads them
#   traffic    experiments/forward_traffic.py under ncu at $MOK_TRAFFIC_SHAPES (default anchor-2), backends
#              $MOK_TRAFFIC_BACKENDS (default cuda; sonicmoe as for energy): DRAM and L2 bytes, SM clock and
#              instructions of each kernel of one bench forward ($MOK_TRAFFIC_ARGS: e.g. "--config policy=whole",
#              with $MOK_TRAFFIC_TAG appended to the file names), and the GEMMs' L2 bytes beside forward_traffic.py's
#              tile model (--explain; a tag with "gather" models gather dispatch)
#   pushpull   experiments/push_pull.py (push vs pull kernels; the notebook stage measures this too)
#   notebooks  notebooks/*.ipynb in full mode (re-measured: MOK_NOTEBOOK_REFRESH=1), executed copies in $OUT/notebooks
#   train      experiments/train_tiny_moe.py (tokens/s per backend; bitwise loss curves, EP 1 vs EP 4)
#
# Environment
#   MOK_STAGES            comma list of stages (arguments win)
#   MOK_DEADLINE_S        seconds from start by which every stage must be done (default 560: the call's hard
#                         limit is 600 s, and the summary and file transfer need the rest)
#   MOK_TIMEOUT_<STAGE>   cap for one stage in seconds (TESTS 540: the suite took 344 s in round 33, more than 420 s
#                         in round 40, so with the sanitizers it needs two calls; BENCH 300 or 540 with SonicMoE, CUDA
#                         200, SANITIZE 200, BREAKDOWN 150, TUNE 200, ROOFLINE 200, TIMELINE 150, ENERGY 240, TRAFFIC
#                         240, NCUSRC 240, PUSHPULL 120, NOTEBOOKS 300, TRAIN 180); a stage also never runs past the
#                         deadline
#   MOK_BENCH_SHAPES      shapes for the bench stage (presets/groups, see python3 -m mok.bench --help)
#   MOK_BENCH_ARGS        extra arguments for the bench stage (e.g. "--iters 50 --backends torch,triton"; add
#                         "--interleave" for same-run ratios that the machine's drift does not bias)
#   MOK_CUDA_BENCH        shapes the cuda stage times the megakernel on (default "kimi-k2.7/ep64 anchor-4")
#   MOK_TUNE_ARGS         extra arguments for experiments/tune_triton.py
#   MOK_SONIC_SHAPES      opt-in SonicMoE for these bench shapes. Its GEMMs compile and autotune on first use
#                         (round 7, H200: the five anchors, forward only, took 403 s in all; a shape's forward
#                         and backward about 9 minutes, round 30, so the bench times SonicMoE forward only
#                         unless MOK_BENCH_ARGS has --sonic-backward): use a call of its own, e.g. MOK_STAGES=bench
#                         MOK_BENCH_SHAPES=anchors
#                         MOK_SONIC_SHAPES=anchor-1,...,anchor-5 MOK_BENCH_ARGS="--backends torch,cuda --passes fwd".
#                         Needs the bundle in .carry/sonic (carry it): see ../shared/tools/sonic_bundle.sh. Its
#                         compiled GEMMs come back as quack_cache.tgz: carried as .carry/quack_cache.tgz they
#                         spare a later call the compilation (round 30: anchor-5's forward and backward in 283 s)
#   MOK_PIP_INSTALL=1     pip install -e . (default: PYTHONPATH=. , which needs no install)
#   MOK_PYTEST_ARGS       extra pytest arguments (e.g. "-k triton" or "tests/test_triton_gpu.py")
#   MOK_SANITIZE_ARGS     arguments of the sanitize stage's mok.cuda.sanitize_check (e.g. "--clusters-only")
#   MOK_GIT_COMMIT        recorded as the commit in every result (the GPU copy of the tree has no .git)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START=$(date +%s)
# Everything is written under $WORK and packed into one archive in $DEST at the end: the device tool returns at
# most 8 files from $OUT, so logs, results and notebooks travel as $DEST/gpu_results.tgz.
DEST=${OUT:-$ROOT/build}
WORK=$ROOT/build/gpu_out
rm -rf "$WORK" && mkdir -p "$WORK/logs" "$WORK/results"
OUT=$WORK
export OUT
export PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # never NVLink multicast
# Compile caches in an ignored folder, which the GPU machine keeps between calls while it stays warm.
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$ROOT/build/mok-cache/triton}
export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$ROOT/build/mok-cache/torch_extensions}
export CUTE_DSL_CACHE_DIR=${CUTE_DSL_CACHE_DIR:-$ROOT/build/mok-cache/cute_dsl}
DEADLINE=${MOK_DEADLINE_S:-560}

if [ $# -gt 0 ]; then STAGES="$*"; else STAGES=${MOK_STAGES:-tests,bench,notebooks,train}; fi
STAGES=${STAGES//,/ }
SUMMARY=()

elapsed() { echo $(( $(date +%s) - START )); }

# run_stage NAME CAP COMMAND...: run with a time limit of min(CAP, time left before the deadline), log to
# $OUT/logs/NAME.log, print the elapsed time, and record a summary row. Never exits the script.
run_stage() {
  local name=$1 cap=$2; shift 2
  local left=$(( DEADLINE - $(elapsed) ))
  local limit=$(( cap < left ? cap : left ))
  if [ "$limit" -lt 20 ]; then
    echo "=== $name: skipped (only ${left}s left before the ${DEADLINE}s deadline)"
    SUMMARY+=("$(printf '%-10s %-8s %6s  %s' "$name" skipped - "no time left")")
    return
  fi
  echo "=== $name: start at +$(elapsed)s, limit ${limit}s"
  local t0=$(date +%s)
  timeout --signal=TERM --kill-after=10 "$limit" "$@" 2>&1 | tee "$OUT/logs/$name.log"
  local rc=${PIPESTATUS[0]}
  local took=$(( $(date +%s) - t0 ))
  local status=ok
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then status=timeout; elif [ "$rc" -ne 0 ]; then status="rc=$rc"; fi
  echo "=== $name: $status after ${took}s (total +$(elapsed)s)"
  SUMMARY+=("$(printf '%-10s %-8s %5ss  %s' "$name" "$status" "$took" "$(tail -n 1 "$OUT/logs/$name.log" | cut -c1-90)")")
}

# ---- setup -------------------------------------------------------------------------------------------------
echo "=== setup: +$(elapsed)s"
python3 - <<'PY' 2>&1 | tee "$OUT/logs/setup.log"
import torch, triton, sys
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, triton {triton.__version__}, "
      f"cuda {torch.version.cuda}, gpus {torch.cuda.device_count()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"gpu 0: {p.name}, {p.multi_processor_count} SMs, {p.total_memory / 2**30:.0f} GiB")
PY
if [ "${MOK_PIP_INSTALL:-0}" = 1 ]; then
  python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -n 3
else
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
fi
# SonicMoE is unpacked when the bench times it (MOK_SONIC_SHAPES) or a stage's backends name it (the energy,
# fwdprofile and traffic stages: MOK_ENERGY_BACKENDS, MOK_FWDPROFILE_BACKENDS, MOK_TRAFFIC_BACKENDS), so no call
# has to unpack it by hand.
SONIC_ARGS=(--no-sonic)
SONIC_READY=0
SONIC_NAMED="${MOK_ENERGY_BACKENDS:-},${MOK_FWDPROFILE_BACKENDS:-},${MOK_TRAFFIC_BACKENDS:-}"
if [ -n "${MOK_SONIC_SHAPES:-}" ] || [[ "$SONIC_NAMED" == *sonicmoe* ]]; then
  if [ -f .carry/sonic/libs_base.tar.xz ]; then
    t0=$(date +%s)
    if [ ! -d /tmp/sonic/sonicmoe ]; then
      mkdir -p /tmp/sonic && tar xJf .carry/sonic/libs_base.tar.xz -C /tmp/sonic \
        && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/sonic .carry/sonic/*.whl
    fi
    export PYTHONPATH=/tmp/sonic:/tmp/sonic/nvidia_cutlass_dsl/python_packages:${PYTHONPATH:-}
    # SonicMoE's GEMMs (quack) autotune on first use: compile every candidate config in worker processes (one
    # per core here), keep the .o files and the choices on disk (kept while the machine stays warm).
    export QUACK_CACHE_DIR=${QUACK_CACHE_DIR:-$ROOT/build/mok-cache/quack} QUACK_CACHE_AUTOTUNING=1
    export QUACK_COMPILE_WORKERS=${QUACK_COMPILE_WORKERS:-$(nproc)}
    # Without a saved choice quack compiles every candidate (round 30: 70-115 s per GEMM, about 9 minutes for a
    # shape's forward and backward); with one it compiles only the chosen config, or loads its .o file. An earlier
    # call's cache, which this script returns as $DEST/quack_cache.tgz, seeds it when carried as
    # .carry/quack_cache.tgz.
    if [ -f .carry/quack_cache.tgz ]; then
      mkdir -p "$QUACK_CACHE_DIR" && tar xzf .carry/quack_cache.tgz -C "$QUACK_CACHE_DIR" \
        && echo "=== setup: quack cache seeded ($(find "$QUACK_CACHE_DIR" -name '*.o' | wc -l) compiled GEMMs)"
    fi
    python3 -c "import sonicmoe; print('SonicMoE', getattr(sonicmoe, '__version__', '?'), 'imports')" \
      && SONIC_READY=1
    [ "$SONIC_READY" = 1 ] && [ -n "${MOK_SONIC_SHAPES:-}" ] && SONIC_ARGS=(--sonic --sonic-shapes "$MOK_SONIC_SHAPES")
    echo "=== setup: SonicMoE unpacked in $(( $(date +%s) - t0 ))s"
  else
    echo "=== setup: SonicMoE is asked for but .carry/sonic/libs_base.tar.xz is missing: SonicMoE skipped"
  fi
fi
echo "=== setup: done at +$(elapsed)s"

# ---- stages ------------------------------------------------------------------------------------------------
for stage in $STAGES; do
  case $stage in
    tests)
      # shellcheck disable=SC2086
      run_stage tests "${MOK_TIMEOUT_TESTS:-540}" python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs \
        ${MOK_PYTEST_ARGS:-tests/} ;;
    bench)
      cap=${MOK_TIMEOUT_BENCH:-300}
      [ "${SONIC_ARGS[0]}" = --sonic ] && cap=${MOK_TIMEOUT_BENCH:-540}
      # shellcheck disable=SC2086
      run_stage bench "$cap" python3 -m mok.bench --shapes "${MOK_BENCH_SHAPES:-anchors,ep64}" --passes fwd,bwd \
        --max-seconds 8 "${SONIC_ARGS[@]}" ${MOK_BENCH_ARGS:-} ;;
    cuda)
      # The megakernel in its own processes: a fault there must not poison the other stages' CUDA context.
      run_stage cuda "${MOK_TIMEOUT_CUDA:-200}" bash -c "python3 -m mok.cuda.build --jit \
        && python3 -m mok.cuda.sanitize_check \
        && python3 -m pytest -q -x -p no:cacheprovider -rfEs --timeout 60 tests/test_cuda_gpu.py; \
        for s in \${MOK_CUDA_BENCH:-kimi-k2.7/ep64 anchor-4}; do python3 -m mok.cuda.sanitize_check --bench \$s; done" ;;
    sanitize)
      # compute-sanitizer on one small forward of the megakernel: memcheck, then racecheck.
      run_stage sanitize "${MOK_TIMEOUT_SANITIZE:-200}" bash -c "compute-sanitizer --tool memcheck --error-exitcode 9 \
        python3 -m mok.cuda.sanitize_check ${MOK_SANITIZE_ARGS:-}; echo memcheck rc=\$?; compute-sanitizer --tool racecheck \
        --error-exitcode 9 python3 -m mok.cuda.sanitize_check ${MOK_SANITIZE_ARGS:-}; echo racecheck rc=\$?" ;;
    breakdown)
      # Where the megakernel layer's time goes: schedule build, host prep, kernel, comm not hidden, GEMM-only.
      run_stage breakdown "${MOK_TIMEOUT_BREAKDOWN:-150}" bash -c "python3 -m mok.cuda.build --jit \
        && python3 experiments/cuda_breakdown.py" ;;
    tune)
      # Per-stage timing of the Triton forward and backward, and candidate tile configs per kernel.
      run_stage tune "${MOK_TIMEOUT_TUNE:-200}" python3 experiments/tune_triton.py ${MOK_TUNE_ARGS:-} ;;
    ncu)
      # Nsight Compute on the megakernel (ring, gather, mainloop only) and torch._grouped_mm at $MOK_NCU_SHAPE:
      # the counters behind the GEMM gap. Metrics that this ncu does not know are left out (queried first).
      run_stage ncu "${MOK_TIMEOUT_NCU:-240}" bash -c '
        shape=${MOK_NCU_SHAPE:-anchor-4}
        known=$(ncu --query-metrics --chip gh100 2>/dev/null | awk "{print \$1}")
        extra=$( { echo "$known" | grep -E "^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active$" | sed "s/$/.ratio/";
                   echo "$known" | grep -E "^sm__pipe_tensor_op_(gmma|hmma)_cycles_active$" | sed "s/$/.avg.pct_of_peak_sustained_active/"; } | paste -sd, -)
        echo "extra metrics: $extra"
        python3 -m mok.cuda.build --jit \
        && ncu --clock-control none --nvtx --nvtx-include "profile/" --section SpeedOfLight \
             --section MemoryWorkloadAnalysis --section WarpStateStats --section LaunchStats \
             ${extra:+--metrics "$extra"} -f -o "$OUT/results/ncu_gemm_gap" \
             python3 experiments/ncu_gemm_gap.py "$shape" --launch \
        && python3 experiments/ncu_gemm_gap.py "$shape" --report "$OUT/results/ncu_gemm_gap.ncu-rep" \
           | tee "$OUT/results/ncu_gemm_gap.md"' ;;
    ncusrc)
      # Nsight Compute's source counters on the megakernel's ring and gather launches at $MOK_NCU_SHAPE (default
      # anchor-2), built with -lineinfo: the per-instruction CSV comes back gzipped, and
      # experiments/ncu_source_lines.py sums it by CUDA source line on the CPU machine (round 37).
      run_stage ncusrc "${MOK_TIMEOUT_NCUSRC:-240}" bash -c '
        shape=${MOK_NCU_SHAPE:-anchor-2}; mkdir -p build/ncu
        export MOK_CUDA_LINEINFO=1
        python3 -m mok.cuda.build --jit \
        && ncu --clock-control none --nvtx --nvtx-include "profile/" -k regex:sm90_moe_forward --launch-count 2 \
             --section SourceCounters --section WarpStateStats --import-source yes -f -o build/ncu/source_counters \
             python3 experiments/ncu_gemm_gap.py "$shape" --launch \
        && ncu -i build/ncu/source_counters.ncu-rep --page source --csv --print-source sass \
           | gzip > "$OUT/results/ncu_source_sass_$shape.csv.gz"' ;;
    traffic)
      # DRAM and L2 bytes, SM clock and instructions of each kernel of one bench forward (router inside), per
      # backend in its own process (experiments/forward_traffic.py), at $MOK_TRAFFIC_SHAPES.
      run_stage traffic "${MOK_TIMEOUT_TRAFFIC:-240}" bash -c '
        python3 -m mok.cuda.build --jit || exit 1
        metrics=$(python3 experiments/forward_traffic.py --print-metrics); rc=0
        mkdir -p build/ncu  # the reports stay on the machine: four of them made the archive too large to return
        for shape in ${MOK_TRAFFIC_SHAPES:-anchor-2}; do
          for b in ${MOK_TRAFFIC_BACKENDS:-cuda}; do
            name="traffic_${shape}_${b}${MOK_TRAFFIC_TAG:-}"
            rep="build/ncu/$name" res="$OUT/results/$name"
            ncu --clock-control none --nvtx --nvtx-include "traffic/" --metrics "$metrics" -f -o "$rep" \
                python3 experiments/forward_traffic.py "$shape" --backend "$b" --launch ${MOK_TRAFFIC_ARGS:-} \
              && python3 experiments/forward_traffic.py "$shape" --report "$rep.ncu-rep" --json "$res.json" \
                | tee "$res.md" || rc=1
            # the L2 bytes of the GEMMs beside the tile model (round 42); the saved report stays either way
            [ -f "$res.json" ] && python3 experiments/forward_traffic.py --explain "$res.json" | tee -a "$res.md"
          done
        done
        exit $rc' ;;
    mvalidate)
      # Issue #6 command 1 on every GPU count this machine has: correctness and bitwise determinism across real
      # GPUs (torchrun, one process per GPU, PyTorch symmetric memory for peers). $MOK_MVALIDATE_BACKENDS sets
      # the large shape's backends (default reference,nccl,triton,cuda; cuda needs Hopper).
      run_stage mvalidate "${MOK_TIMEOUT_MVALIDATE:-240}" bash -c '
        ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
        R="python3 -m torch.distributed.run --standalone"; rc=0
        for n in $(seq 1 $ngpu); do
          timeout 120 $R --nproc-per-node $n -m mok.dist_cli validate --shape 512,256,128,32,4 --dtype bf16 \
            --skew 1 --backend reference,nccl --transport collective,peers,peers-triton \
            --out $OUT/results/validate_bf16_${n}gpu.json || { echo "validate n=$n FAILED"; rc=1; }
        done
        timeout 120 $R --nproc-per-node $ngpu -m mok.dist_cli validate --shape 512,256,128,32,4 --dtype fp32 \
          --minibatch 32 --ring 64 --tile 16 --out $OUT/results/validate_fp32_ring_${ngpu}gpu.json \
          || { echo "fp32 ring FAILED"; rc=1; }
        timeout 150 $R --nproc-per-node $ngpu -m mok.dist_cli validate --shape 2048,1024,512,64,8 --dtype bf16 \
          --tile 128 --backend ${MOK_MVALIDATE_BACKENDS:-reference,nccl,triton,cuda} \
          --out $OUT/results/validate_bf16_large_${ngpu}gpu.json || { echo "large FAILED"; rc=1; }
        python3 -c "
import glob, json
for f in sorted(glob.glob(\"$OUT/results/validate_*gpu.json\")):
    runs = json.load(open(f))[\"runs\"]; ok = all(r[\"passed\"] for r in runs.values())
    print(f.split(\"/\")[-1], \"passed\" if ok else \"FAILED\", {k: r[\"fingerprint\"][:12] for k, r in runs.items()})"
        exit $rc' ;;
    mbench)
      # Issue #6 command 2: layer time vs the NCCL baseline, push vs pull bandwidth and signalling, on all GPUs.
      run_stage mbench "${MOK_TIMEOUT_MBENCH:-480}" bash -c '
        ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
        python3 -m torch.distributed.run --standalone --nproc-per-node $ngpu -m mok.dist_cli bench \
          --tokens-per-gpu 2048 ${MOK_MBENCH_ARGS:---backends nccl,triton,cuda --iters 10 --warmup 3} \
          --out $OUT/results/bench_x${ngpu}_${MOK_MBENCH_TAG:-uniform} \
        && cat $OUT/results/bench_x${ngpu}_${MOK_MBENCH_TAG:-uniform}.md' ;;
    ab)
      # experiments/ab_kernels.py: two builds of the megakernel timed interleaved and compared bit for bit.
      run_stage ab "${MOK_TIMEOUT_AB:-240}" python3 experiments/ab_kernels.py ${MOK_AB_ARGS:?set MOK_AB_ARGS} \
        --clock-log "$OUT/results/ab_clocks.csv" ;;
    ablayer)
      # experiments/ab_layer.py: the layer as a user calls it, two settings of the backend's switches (round 19).
      # shellcheck disable=SC2086
      run_stage ablayer "${MOK_TIMEOUT_ABLAYER:-200}" python3 experiments/ab_layer.py \
        ${MOK_ABLAYER_ARGS:?set MOK_ABLAYER_ARGS} ;;
    fwdprofile)
      # experiments/profile_forward.py: what the bench's forward spends beyond the megakernel (round 16).
      run_stage fwdprofile "${MOK_TIMEOUT_FWDPROFILE:-200}" bash -c "python3 -m mok.cuda.build --jit \
        && python3 experiments/profile_forward.py --sync-debug --backends ${MOK_FWDPROFILE_BACKENDS:-cuda,torch} \
           --json $OUT/results/profile_forward.json ${MOK_FWDPROFILE_SHAPES:-anchor-2 kimi-k2.7/ep64}" ;;
    profile)
      # experiments/profile_backward.py: host vs kernel time of one training backward per backend, and where the
      # backward synchronises with the host, at $MOK_PROFILE_SHAPES (default: the qwen slice, the host-bound one).
      run_stage profile "${MOK_TIMEOUT_PROFILE:-150}" bash -c '
        for shape in ${MOK_PROFILE_SHAPES:-qwen3.5-397b/ep64}; do
          python3 experiments/profile_backward.py "$shape" --sync-debug || exit 1
        done' ;;
    roofline)
      # Round 13: the bare GEMM mainloop (experiments/mainloop_roofline_probe.cu, its modes interleaved at 16 and 160
      # tiles per CTA) and then, one workload at a time with the SM clock sampled, the probe's modes against the
      # megakernel at $MOK_ROOFLINE_SHAPES (experiments/mainloop_gap.py): TFLOP/s, clock, power, TFLOP/s per GHz.
      run_stage roofline "${MOK_TIMEOUT_ROOFLINE:-200}" bash -c '
        nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
          -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu || exit 1
        build/mainloop_roofline_probe 16 && build/mainloop_roofline_probe 160 || exit 1
        python3 -m mok.cuda.build --jit \
        && python3 experiments/mainloop_gap.py --seconds 2 ${MOK_ROOFLINE_SHAPES:-anchor-5 kimi-k2.7/ep64}' ;;
    pushstore)
      # Round 14: what rate the down epilogue's row push can reach, by who issues the stores (no lookups, no
      # hand-offs): the ceiling for the consumers' push (gather mode) and for the store warps (ring mode).
      run_stage pushstore "${MOK_TIMEOUT_PUSHSTORE:-60}" bash -c "
        nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
          -o build/push_store_probe experiments/push_store_probe.cu && build/push_store_probe ${MOK_PUSHSTORE_ARGS:-}" ;;
    timeline)
      # Round 13: the megakernel's task timeline (launch(trace=...)) at $MOK_TIMELINE_SHAPES: per kind of task its
      # share of the SMs' time, its rate, its dependency waits, and the tail (experiments/task_timeline.py).
      run_stage timeline "${MOK_TIMEOUT_TIMELINE:-150}" bash -c "python3 -m mok.cuda.build --jit \
        && python3 experiments/task_timeline.py ${MOK_TIMELINE_ARGS:-} \
           ${MOK_TIMELINE_SHAPES:-anchor-2 anchor-5 kimi-k2.7/ep64}" ;;
    energy)
      # Round 32: experiments/energy_per_layer.py: ms, SM clock, power and joules per forward, per backend.
      run_stage energy "${MOK_TIMEOUT_ENERGY:-240}" bash -c "python3 -m mok.cuda.build --jit \
        && python3 experiments/energy_per_layer.py ${MOK_ENERGY_SHAPES:-anchor-2 anchor-5} \
           --backends ${MOK_ENERGY_BACKENDS:-cuda,torch} --json $OUT/results/energy_per_layer.json \
           --plot $OUT/results/energy_per_layer.png" ;;
    pushpull)
      run_stage pushpull "${MOK_TIMEOUT_PUSHPULL:-120}" python3 experiments/push_pull.py ;;
    notebooks)
      # The megakernel is built first (cached), so megakernel_anatomy's timelines do not pay its JIT (off Hopper the
      # build fails and that notebook reads the saved timelines instead).
      run_stage notebooks "${MOK_TIMEOUT_NOTEBOOKS:-300}" bash -c "python3 -m mok.cuda.build --jit > /dev/null 2>&1; \
        MOK_NOTEBOOK_MODE=full MOK_NOTEBOOK_REFRESH=1 python3 -m mok.bench.notebook_runner \
           notebooks/push_vs_pull.ipynb notebooks/sm_wave_threshold.ipynb notebooks/overlap_granularity.ipynb \
           notebooks/megakernel_anatomy.ipynb --out-dir $OUT/notebooks --timeout 200" ;;
    train)
      run_stage train "${MOK_TIMEOUT_TRAIN:-180}" python3 experiments/train_tiny_moe.py ;;
    *)
      echo "=== unknown stage '$stage' (see the stage list at the top of this script)"
      SUMMARY+=("$(printf '%-10s %-8s %6s  %s' "$stage" unknown - "")") ;;
  esac
done

# ---- summary (last, so the reply's tail carries it) --------------------------------------------------------
echo
echo "=================== summary (+$(elapsed)s) ==================="
if [ -f "$OUT/results/bench_latest.json" ]; then
  python3 -m mok.bench --summarize "$OUT/results/bench_latest.json" 2>&1 | grep -E "^geomean|^bench" | head -n 24
fi
if [ -f "$OUT/results/train_tiny_moe.json" ]; then
  python3 - "$OUT/results/train_tiny_moe.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for r in doc["summary"]:
    ep = "n/a" if r["ep_bitwise"] is None else ("yes" if r["ep_bitwise"] else "NO")
    print(f"train {r['backend']:<10} {r['tokens_per_s'] or 0:12,.0f} tok/s  repeat bitwise "
          f"{'yes' if r['repeat_bitwise'] else 'NO'}  EP1=EP{doc['ep_compared']} {ep}")
PY
fi
grep -hE "^(FAILED|ERROR)|[0-9]+ (passed|failed)" "$OUT/logs/tests.log" 2>/dev/null | tail -n 8
for row in "${SUMMARY[@]}"; do echo "stage $row"; done
tar czf "$DEST/gpu_results.tgz" -C "$WORK" . && echo "packed: $DEST/gpu_results.tgz ($(du -h "$DEST/gpu_results.tgz" | cut -f1))"
if [ "$SONIC_READY" = 1 ] && [ -d "${QUACK_CACHE_DIR:-}" ]; then  # for the next call's .carry/quack_cache.tgz
  (cd "$QUACK_CACHE_DIR" && find . -type f ! -name '*.lock' | tar czf "$DEST/quack_cache.tgz" -T -) \
    && echo "packed: $DEST/quack_cache.tgz ($(du -h "$DEST/quack_cache.tgz" | cut -f1))"
fi
