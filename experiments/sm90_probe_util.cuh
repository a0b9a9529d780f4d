// What the standalone SM90 probes (tma_row_gather_probe.cu, mainloop_roofline_probe.cu, push_store_probe.cu,
// swiglu_epilogue_probe.cu) share beyond the megakernel's own primitives (mok/cuda/include/mok/sync.cuh, tma.cuh),
// which they use as the kernel does: a CUDA error check, the interleaved median timer, a tensor map like the kernel's,
// an mbarrier wait without the kernel's error record, and the few 2-CTA cluster operations the kernel on main does
// not have.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "mok/gemm_mainloop.cuh"  // sw128_chunk_offset
#include "mok/sync.cuh"
#include "mok/tma.cuh"

#define PROBE_CHECK(x)                                                                        \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace probe {

// The megakernel's own primitives, used by the probes exactly as the kernel uses them.
using mok::sm90::cp_async_mbar_arrive_noinc;
using mok::sm90::fence_proxy_async_shared;
using mok::sm90::mbar_arrive;
using mok::sm90::mbar_arrive_expect_tx;
using mok::sm90::mbar_init;
using mok::sm90::smem_addr;
using mok::sm90::tma_load_2d;

// The megakernel's stage ring: 4 stages of A (128 rows x 64 bf16) and B (256 rows x 64 bf16), 128-byte swizzled
// (its shared memory also holds the epilogue staging and the task queue, which the probes do not need).
// -DPROBE_STAGES=3 builds a probe with three: what a stage fewer costs the mainloop, the price of 32 KB of epilogue
// staging per consumer warpgroup (round 41: nothing at K = 1024-4096; mok/cuda/ROUNDS.md).
#ifndef PROBE_STAGES
#define PROBE_STAGES 4
#endif
constexpr int kStages = PROBE_STAGES;
static_assert(kStages >= 2 && kStages <= 4, "the stage ring fits shared memory with 2 to 4 stages");
constexpr int kRows = 128;   // A rows per tile
constexpr int kBRows = 256;  // B rows per tile
constexpr int kBlockK = 64;  // bf16 columns per K block: 128 bytes
constexpr int kABytes = kRows * 128;
constexpr int kBBytes = kBRows * 128;

struct Shared {
  alignas(1024) uint8_t a[kStages][kABytes];
  alignas(1024) uint8_t b[kStages][kBBytes];
  uint64_t full[kStages];
  uint64_t empty[kStages];
  uint64_t half_full[kStages];  // cpasync-pairA: this CTA's half of the A stage has landed (its own copies)
  int rows[kRows];  // the tile's token rows (gathers)
};

// Spin until the mbarrier's phase with this parity completes (no time-out: a probe that hangs is a probe bug).
__device__ __forceinline__ void mbar_wait_spin(uint64_t* bar, uint32_t parity) {
  while (!mok::sm90::mbar_try_wait(bar, parity)) {
  }
}

// Arrive on the mbarrier at the same offset in CTA `rank` of the cluster. kClusterRelease: with release semantics
// at cluster scope (what round 9's cluster draft used: 1.8x slower, mok/cuda/ROUNDS.md "Round 13"); otherwise the
// instruction's defaults, as CUTLASS's cluster barrier arrives.
template <bool kClusterRelease>
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(mok::sm90::smem_addr(bar)), "r"(rank));
  if constexpr (kClusterRelease) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
  } else {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(remote) : "memory");
  }
}

// A TMA box into the same shared offset of every CTA in `mask`, completing bytes on each one's mbarrier there.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int col,
                                                      int row, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(mok::sm90::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(mok::sm90::smem_addr(bar)), "r"(col), "r"(row), "h"(mask)
      : "memory");
}

__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// Gather mode's copies of K block `kb` (the kernel's gather_issue, without its padding rows and prefetch): producer
// thread `tid` of 128 copies chunk tid % 8 of tile rows tid / 8 + 16 i from token row rows[r] of `x` ([*, hidden]
// bf16) to where TMA's 128-byte swizzle would put it in the A stage at shared address `stage_a`.
__device__ __forceinline__ void gather_kblock(uint32_t stage_a, const char* x, int hidden, const int* rows, int kb,
                                              int tid) {
  const int chunk = tid & 7, row = tid >> 3;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = row + 16 * i;
    mok::sm90::cp_async_16(stage_a + mok::sm90::sw128_chunk_offset(r, chunk),
                           x + static_cast<long long>(rows[r]) * hidden * 2 + kb * 128 + chunk * 16, 16u);
  }
}

// One CTA's half of gather mode's copies (cpasync-pairA): producer thread `tid` of 64 copies chunk tid % 8 of tile
// rows row0 + tid / 8 + 8 i (i < 8), row0 = 0 or 64, to where TMA's 128-byte swizzle would put them.
__device__ __forceinline__ void gather_half_kblock(uint32_t stage_a, const char* x, int hidden, const int* rows, int kb,
                                                   int tid, int row0) {
  const int chunk = tid & 7;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int r = row0 + (tid >> 3) + 8 * i;
    mok::sm90::cp_async_16(stage_a + mok::sm90::sw128_chunk_offset(r, chunk),
                           x + static_cast<long long>(rows[r]) * hidden * 2 + kb * 128 + chunk * 16, 16u);
  }
}

// `bytes` of this CTA's shared memory at `src` into the same offset in CTA `rank` of the cluster by the bulk copy
// engine, completing them on that CTA's mbarrier at the offset of `bar`.
__device__ __forceinline__ void bulk_copy_to_peer(uint32_t src, uint32_t bytes, uint64_t* bar, uint32_t rank) {
  uint32_t dst, remote_bar;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(dst) : "r"(src), "r"(rank));
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(mok::sm90::smem_addr(bar)), "r"(rank));
  asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
               ::"r"(dst), "r"(src), "r"(bytes), "r"(remote_bar) : "memory");
}

// Milliseconds per launch of each of `modes` modes: the median of `runs` CUDA-event timings after one warm-up round,
// the modes interleaved and rotated run by run so that no mode always follows the same one (they share one power
// state). `launch(mode)` enqueues one launch of that mode; `only` >= 0 times that mode alone (the others stay NaN).
template <class Launch>
std::vector<double> median_ms_rotated(int modes, int runs, Launch&& launch, int only = -1) {
  cudaEvent_t e0, e1;
  PROBE_CHECK(cudaEventCreate(&e0));
  PROBE_CHECK(cudaEventCreate(&e1));
  std::vector<std::vector<float>> ms(modes);
  for (int run = 0; run < runs + 1; ++run) {  // run 0 warms up
    for (int i = 0; i < modes; ++i) {
      const int mode = (i + run) % modes;
      if (only >= 0 && mode != only) continue;
      PROBE_CHECK(cudaEventRecord(e0));
      launch(mode);
      PROBE_CHECK(cudaEventRecord(e1));
      PROBE_CHECK(cudaEventSynchronize(e1));
      PROBE_CHECK(cudaGetLastError());
      float t = 0.0f;
      PROBE_CHECK(cudaEventElapsedTime(&t, e0, e1));
      if (run > 0) ms[mode].push_back(t);
    }
  }
  PROBE_CHECK(cudaEventDestroy(e0));
  PROBE_CHECK(cudaEventDestroy(e1));
  std::vector<double> median(modes, NAN);
  for (int m = 0; m < modes; ++m) {
    if (ms[m].empty()) continue;
    std::sort(ms[m].begin(), ms[m].end());
    median[m] = ms[m][ms[m].size() / 2];
  }
  return median;
}

// `count` expert tiles of 128 rows each: 128 distinct token rows of `tokens`, ascending (a stable sort's order), as
// random routing gives them.
inline std::vector<int> random_tile_rows(int tokens, int count, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<int> rows(static_cast<size_t>(count) * 128), pick(tokens);
  for (int t = 0; t < count; ++t) {
    for (int i = 0; i < tokens; ++i) pick[i] = i;
    std::shuffle(pick.begin(), pick.end(), rng);
    std::sort(pick.begin(), pick.begin() + 128);
    std::copy(pick.begin(), pick.begin() + 128, rows.begin() + static_cast<size_t>(t) * 128);
  }
  return rows;
}

// A bf16 row-major [rows, cols] matrix read in boxes of {64 columns, box_rows rows} with the 128-byte swizzle, as
// the kernel's tensor maps (csrc/sm90_moe_forward.cu), through the runtime's driver entry point (no -lcuda).
inline CUtensorMap encode_bf16_2d(void* base, uint64_t rows, uint64_t cols, uint32_t box_rows) {
  using EncodeFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
  static EncodeFn fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    PROBE_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q));
    return reinterpret_cast<EncodeFn>(ptr);
  }();
  CUtensorMap map;
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * 2};
  const cuuint32_t box[2] = {64, box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  if (fn(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, base, dims, strides, box, element_strides,
         CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
         CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled failed (rows %llu, cols %llu, box rows %u)\n",
                 static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols), box_rows);
    std::exit(1);
  }
  return map;
}

}  // namespace probe
