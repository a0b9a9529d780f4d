# Round 23, call 4 (23f5ced + the counting-sort patch + binding.cpp's numbers formatted as strings + the refusal test;
# MOK_GIT_COMMIT set by hand): the throw probe again (every case should now raise), whether the built extension carries
# its own ostream::_M_insert<long>, the whole GPU suite (the counting sort is now what every cuda layer call on a
# rank's slots uses), then cuda_breakdown.py (the schedule's share of the layer) at the nine shapes.
export PYTHONPATH=$PWD TORCH_EXTENSIONS_DIR=$PWD/build/mok-cache/torch_extensions TRITON_CACHE_DIR=$PWD/build/mok-cache/triton NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
K=$OUT/k; mkdir -p $K; P=experiments/results/h200_2026-11-30_round23
timeout 150 python3 $P/throw_probe.py 2>&1 | tee $K/throw.log
SO=$(ls -t $HOME/.cache/mok/mok_sm90_*/mok_sm90_*.so | head -1); echo "so: $SO"; (nm -C $SO | grep -E "_M_insert|num_put<char" | head -8; echo "--- defined weak/text:"; nm -C --defined-only $SO | grep -cE "_M_insert|num_put"; g++ --version | head -1; strings -a $SO | grep -m3 "GCC:") > $K/so_symbols.log 2>&1; cat $K/so_symbols.log
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEs tests/ > $K/suite.log 2>&1; echo suite rc=$?; tail -2 $K/suite.log
timeout 100 python3 experiments/cuda_breakdown.py --out $K > $K/breakdown.log 2>&1; echo breakdown rc=$?; tail -14 $K/breakdown.log
cd $OUT && tar czf /tmp/call.tgz . && rm -rf $OUT/* && mv /tmp/call.tgz $OUT/call.tgz
