# Round 40, call 9 (carrying SonicMoE; run from a copy at experiments/_call9.sh): do the H200's clocks move during the
# anchors' bench? (calls 4-5 and 8 gave anchor-5 9.94 / 10.34 / 8.81 ms for mok and 10.32 / 9.24 ms for SonicMoE
# minutes apart). nvidia-smi logs SM clock, power and the active throttle reasons every 100 ms while the bench runs
# anchor-5 and anchor-3 beside SonicMoE (read only: no setting changes).
export MOK_GIT_COMMIT=7b0e1d8
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,power.limit,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv,noheader -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
MOK_STAGES=bench MOK_SONIC_SHAPES=anchor-5,anchor-3 MOK_BENCH_SHAPES=anchor-5,anchor-3 MOK_TIMEOUT_BENCH=200 \
  MOK_DEADLINE_S=230 MOK_BENCH_ARGS="--backends cuda --passes fwd --interleave" bash experiments/gpu_run.sh 2>&1 \
  | grep -E "^anchor|geomean" | cut -c1-160
kill $SMI
python3 - "$OUT/smi.csv" <<'PY'
import sys, statistics
rows = [l.split(", ") for l in open(sys.argv[1]) if l.count(",") >= 6]
busy = [r for r in rows if float(r[3].split()[0]) > 200]   # samples under load (> 200 W)
clk = [int(r[1].split()[0]) for r in busy]; pw = [float(r[3].split()[0]) for r in busy]
print(f"{len(rows)} samples, {len(busy)} above 200 W; SM clock min/median/max {min(clk)}/{statistics.median(clk)}/{max(clk)} MHz;"
      f" power median/max {statistics.median(pw):.0f}/{max(pw):.0f} W (limit {rows[0][4]}); temp max {max(int(r[5]) for r in rows)} C")
reasons = {}
for r in busy: reasons[r[6].strip()] = reasons.get(r[6].strip(), 0) + 1
print("throttle reasons under load (samples):", reasons)
PY
