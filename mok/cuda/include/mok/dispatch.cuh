// Pull-dispatch: the expert side reads its tile's token rows from the source ranks into the ring.
//
// Row r of rank d's schedule names (src_rank, src_slot); the row's data is x[src_rank][src_slot / K],
// found through the peer pointer table `x_ptrs` (rank s's token buffer base). Padding rows are zeroed,
// as mok.transfers.pull_rows does, so the ring never holds stale values. The ring rows are later read by
// TMA (async proxy); the caller publishes them with publish_writes() before signalling.
#pragma once

#include <cstdint>

#include "scheduler.cuh"
#include "sync.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

__device__ __forceinline__ uint4 load_streaming(const uint4* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

// One warp copies one row of `chunks` 16-byte chunks; eight loads in flight per lane.
__device__ __forceinline__ void copy_row(uint4* dst, const uint4* src, int chunks, int lane) {
  constexpr int kUnroll = 8;
  int c = lane;
  for (; c + 32 * (kUnroll - 1) < chunks; c += 32 * kUnroll) {
    uint4 v[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) v[u] = load_streaming(src + c + 32 * u);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) dst[c + 32 * u] = v[u];
  }
  for (; c < chunks; c += 32) dst[c] = load_streaming(src + c);
}

__device__ __forceinline__ void zero_row(uint4* dst, int chunks, int lane) {
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int c = lane; c < chunks; c += 32) dst[c] = zero;
}

// Dispatch one schedule tile (BLOCK_M rows) with `num_threads` threads (a multiple of 32); `thread` is
// this thread's index among them.
template <class Tiles>
__device__ __forceinline__ void dispatch_tile(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                              int thread, int num_threads) {
  const int warp = thread >> 5;
  const int lane = thread & 31;
  const int num_warps = num_threads >> 5;
  const int chunks = p.hidden / 8;
  const int slots_per_rank = p.tokens_per_rank * p.top_k;
  const long long ring_row0 =
      static_cast<long long>(t.rank) * p.ring_rows + ring_row_of_tile(v, t.tile, Tiles::kBlockM);
  const long long table_row0 = static_cast<long long>(t.rank) * p.capacity + static_cast<long long>(t.tile) * Tiles::kBlockM;
  uint4* ring_x = reinterpret_cast<uint4*>(p.ring_x);

  for (int r = warp; r < Tiles::kBlockM; r += num_warps) {
    const int src_rank = p.src_rank[table_row0 + r];
    const int src_slot = p.src_slot[table_row0 + r];
    uint4* dst = ring_x + (ring_row0 + r) * chunks;
    if (src_rank < 0) {
      zero_row(dst, chunks, lane);
      continue;
    }
    if (src_rank >= p.num_ranks || src_slot < 0 || src_slot >= slots_per_rank) {
      if (lane == 0) record_error(p, kErrBadSchedule, kCtrNone, t.rank, t.tile * Tiles::kBlockM + r, src_rank, src_slot, t.ticket);
      zero_row(dst, chunks, lane);
      continue;
    }
    const uint4* src = reinterpret_cast<const uint4*>(p.x_ptrs[src_rank]) +
                       static_cast<long long>(src_slot / p.top_k) * chunks;
    copy_row(dst, src, chunks, lane);
  }
}

}  // namespace mok::sm90
