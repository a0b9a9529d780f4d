# Round 37, call 1 (nvidia-h200): (1) runtime A/Bs at anchors 2-4 that need no build: ring against gather dispatch at
# anchors 3 and 4 (gather was measured 1% slower at I = 1,024 in round 5, before down_tma, the sum kernel and the
# four-wave ring), gather against ring at anchor-2, the down span 8 against 16 at anchor-2; (2) Nsight Compute's
# source counters on anchor-2's megakernel launches (ring and gather), built with -lineinfo: where the 1.36 G warp
# instructions per forward go (round 35: 1.5x SonicMoE's GEMMs).
# The preamble (environment, `el`, `build_jit`, `ab`) is experiments/device_call.sh since round 37's review;
# the commands are the ones that ran.
export MOK_CUDA_LINEINFO=1
source experiments/device_call.sh
build_jit
ab ring_gather 120 --launch-a dispatch=ring --launch-b dispatch=gather anchor-3 anchor-4
ab gather_ring 60 --launch-a dispatch=gather --launch-b dispatch=ring anchor-2
ab span16 60 --launch-a dispatch=gather --launch-b dispatch=gather --launch-b down_span=16 anchor-2
ncu --help > $K/ncu_help.txt 2>&1
R=build/ncu_src; mkdir -p build
timeout 260 ncu --clock-control none --nvtx --nvtx-include "profile/" -k regex:sm90_moe_forward --launch-count 2 \
  --section SourceCounters --section InstructionStats --section WarpStateStats --section SpeedOfLight \
  --import-source yes -f -o $R python3 experiments/ncu_gemm_gap.py anchor-2 --launch > $K/ncu_run.log 2>&1
el ncu $?; tail -3 $K/ncu_run.log
ncu -i $R.ncu-rep --page details --csv > $K/ncu_details.csv 2> $K/ncu_details.err; el details $?
ncu -i $R.ncu-rep --page source --csv --print-source cuda > $K/ncu_source_cuda.csv 2> $K/ncu_cuda.err; el cuda $?
ncu -i $R.ncu-rep --page source --csv --print-source sass > $K/ncu_source_sass.csv 2> $K/ncu_sass.err; el sass $?
ls -la $K | cut -c1-120
tar czf $OUT/call1.tgz -C $OUT k
