# Round 39, call 3: the router's logits kernel at the four EP-64 slices, default tiling against others of the
# 16-column class. Call 1's profile of the qwen slice: the router 50.5 us of a 0.905 ms busy GPU (x read at 3.3 TB/s,
# kimi's at 4.0): 320 programs of 64 rows are 2.4 waves on 132 SMs. Each tiling is checked to give the same bits
# for any token count (the bench raises otherwise).
export MOK_GIT_COMMIT=2fc9f46
source experiments/device_call.sh
timeout 300 python3 experiments/router_logits_bench.py --shapes qwen3.5-397b/ep64 kimi-k2.7/ep64 glm-5.2/ep64 \
  deepseek-v4-pro/ep64 --iters 100 --json $K/router_tilings.json --tilings 64,16,128,4,4 32,16,128,4,4 \
  32,16,256,4,3 64,16,256,4,3 128,16,128,8,4 128,16,64,4,4 64,16,128,4,6 32,16,128,2,4 16,16,256,2,4 \
  > $K/router_tilings.log 2>&1; el router_tilings $?
cat $K/router_tilings.log | cut -c1-250 | tail -60
tar czf $OUT/call3.tgz -C $OUT k
