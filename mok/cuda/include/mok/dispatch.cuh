// Pull-dispatch: the expert side reads its tile's token rows from the source ranks into the ring.
//
// Row r of rank d's schedule names (src_rank, src_slot); the row's data is x[src_rank][src_slot / K],
// found through the peer pointer table `x_ptrs` (rank s's token buffer base). Padding rows are zeroed,
// as mok.transfers.pull_rows does, so the ring never holds stale values. The ring rows are later read by
// TMA (async proxy); the caller publishes them with publish_writes() before signalling.
//
// MXFP8 (p.mxfp8): the token buffers hold packed MXFP8 rows (mxfp8.cuh), and dispatch dequantizes them on the
// way into the bf16 ring (dispatch_tile_mxfp8).
//
// In the spread order (v.spread_dispatch) the copies run among the gate/up bands, whose weights the L2 should keep
// for the band's row tiles, so their loads and stores carry an evict-first L2 policy (sync.cuh, l2_copy_policy;
// round 45); in the plain order they run beside the down GEMMs with the default priority (evict-first measured
// 0.994-1.002x there).
#pragma once

#include <cstdint>

#include "mxfp8.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

// The source row of table row `r` in the token buffer of its source rank (its first byte), or nullptr for a
// padding row (which is zero-filled) and for an entry outside the source's slots (recorded as an error, then
// zero-filled).
__device__ __forceinline__ const char* dispatch_source(const Sm90MoeParams& p, const Task& t, long long row0,
                                                       int r, int block_m) {
  const int src_rank = p.src_rank[row0 + r];
  const int src_slot = p.src_slot[row0 + r];
  if (src_rank < 0) return nullptr;
  if (src_rank >= p.num_ranks || src_slot < 0 || src_slot >= p.tokens_per_rank * p.top_k) {
    record_error(p, kErrBadSchedule, kCtrNone, t.rank, t.tile * block_m + r, src_rank, src_slot, t.ticket);
    return nullptr;
  }
  return reinterpret_cast<const char*>(p.x_ptrs[src_rank]) + static_cast<long long>(src_slot / p.top_k) * p.x_row_bytes;
}

// The row walk shared by both row formats: dispatch the task's rows of one schedule tile with `num_threads` threads
// (the consumer warps); `thread` is this thread's index among them. A task is the whole tile (BLOCK_M rows), or in the
// first minibatch part t.nblock of v.first_dispatch_parts (scheduler.cuh: D(0) in parts), rows
// [part * ceil(BLOCK_M / parts), ...) of it. Warp w takes rows begin + w + k * num_warps (k = 0, 1, ...),
// kDispatchRowsPerPass at a time, and hands `copy_pass(src, dst, lane)` their sources (nullptr: padding, zero-fill)
// and ring destinations (nullptr: past the task's rows); copy_pass moves the rows' chunks, several per lane in flight.
// The rows' sources are looked up once per task, lane k for the warp's row k (dispatch_source: two dependent table
// loads), and handed out by shuffle, so a pass waits for its rows' loads alone, not for the table first.
// NOTE: a dispatch task runs on one SM while the others run GEMMs: about 20 GB/s per SM at anchor-3 (50.6 us per
// 1 MB task, round 37's timeline), so its speed is mostly the latency of its loads. The table looked up once and
// twice the bytes in flight (dispatch_tile) took 0.987-0.991x the kernel's time at anchors 3-4 and the qwen and kimi
// slices, 0.996-0.997x at anchor-5 and deepseek (round 37, A/B): the tasks' share of the SMs is 8% at anchor-3.
constexpr int kDispatchRowsPerPass = 2;

template <class Tiles, class CopyPass>
__device__ __forceinline__ void dispatch_rows(const Sm90MoeParams& p, const ScheduleView& v, const Task& t, int thread,
                                              int num_threads, CopyPass&& copy_pass) {
  if (p.ablate & kAblateDispatch) return;  // timing ablation: the ring keeps whatever it holds
  const int warp = thread >> 5;
  const int lane = thread & 31;
  const int num_warps = num_threads >> 5;
  const int ring_chunks = p.hidden / 8;  // 16-byte chunks of a bf16 ring row
  const long long ring_row0 = task_ring_row0(p, v, t, Tiles::kBlockM);
  const long long row0 = table_row0<Tiles>(p, t);
  uint4* ring_x = reinterpret_cast<uint4*>(p.ring_x);
  const int parts = v.dispatch_parts(t.minibatch);
  const int part_rows = (Tiles::kBlockM + parts - 1) / parts;
  const int begin = t.nblock * part_rows;
  const int end = begin + part_rows < Tiles::kBlockM ? begin + part_rows : Tiles::kBlockM;
  static_assert(Tiles::kBlockM <= 32 * 4 * Tiles::kNumConsumerWG, "one lane per row of a consumer warp's share");
  const int rows_per_warp = (end - begin + num_warps - 1) / num_warps;

  const int lane_row = begin + warp + lane * num_warps;
  const char* lane_src = lane < rows_per_warp && lane_row < end
                             ? dispatch_source(p, t, row0, lane_row, Tiles::kBlockM)
                             : nullptr;
  const auto lane_src_bits = reinterpret_cast<unsigned long long>(lane_src);
  for (int k0 = 0; k0 < rows_per_warp; k0 += kDispatchRowsPerPass) {
    const char* src[kDispatchRowsPerPass];
    uint4* dst[kDispatchRowsPerPass];
#pragma unroll
    for (int q = 0; q < kDispatchRowsPerPass; ++q) {
      const int k = k0 + q;
      const int r = begin + warp + k * num_warps;
      const bool in_tile = k < rows_per_warp && r < end;
      const auto bits = __shfl_sync(0xffffffffu, lane_src_bits, k & 31);  // every lane takes part
      src[q] = in_tile ? reinterpret_cast<const char*>(bits) : nullptr;
      dst[q] = in_tile ? ring_x + (ring_row0 + r) * ring_chunks : nullptr;
    }
    copy_pass(src, dst, lane);
  }
}

// bf16 token rows: kChunksPerLane 16-byte chunks of each row per lane and pass (predicated at the row's end).
template <class Tiles>
__device__ __forceinline__ void dispatch_tile(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                              int thread, int num_threads) {
  constexpr int kChunksPerLane = 16;  // 2 x 16 loads of 16 bytes per lane in flight: a whole row pair at H = 4096
  const int chunks = p.hidden / 8;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const uint64_t policy = l2_copy_policy(v.spread_dispatch);
  dispatch_rows<Tiles>(p, v, t, thread, num_threads, [&](const char* const (&src)[kDispatchRowsPerPass],
                                                         uint4* const (&dst)[kDispatchRowsPerPass], int lane) {
    for (int c = lane; c < chunks; c += 32 * kChunksPerLane) {
      uint4 value[kDispatchRowsPerPass][kChunksPerLane];
#pragma unroll
      for (int q = 0; q < kDispatchRowsPerPass; ++q) {
#pragma unroll
        for (int u = 0; u < kChunksPerLane; ++u) {
          const int cc = c + 32 * u;
          value[q][u] = (src[q] != nullptr && cc < chunks)
                            ? load_streaming(reinterpret_cast<const uint4*>(src[q]) + cc, policy) : zero;
        }
      }
#pragma unroll
      for (int q = 0; q < kDispatchRowsPerPass; ++q) {
#pragma unroll
        for (int u = 0; u < kChunksPerLane; ++u) {
          const int cc = c + 32 * u;
          if (dst[q] != nullptr && cc < chunks) store_with_policy(dst[q] + cc, value[q][u], policy);
        }
      }
    }
  });
}

// Packed MXFP8 token rows: per lane and pass, kChunksPerLane chunks of 16 codes and each chunk's scale byte
// (chunks 2b and 2b + 1 share block b's), dequantized into two 16-byte chunks of bf16 each.
template <class Tiles>
__device__ __forceinline__ void dispatch_tile_mxfp8(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                                    int thread, int num_threads) {
  constexpr int kChunksPerLane = 4;
  constexpr int kCodesPerChunk = 16;
  const int code_chunks = p.hidden / kCodesPerChunk;
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  const uint64_t policy = l2_copy_policy(v.spread_dispatch);
  dispatch_rows<Tiles>(p, v, t, thread, num_threads, [&](const char* const (&src)[kDispatchRowsPerPass],
                                                         uint4* const (&dst)[kDispatchRowsPerPass], int lane) {
    for (int c = lane; c < code_chunks; c += 32 * kChunksPerLane) {
      uint4 codes[kDispatchRowsPerPass][kChunksPerLane];
      uint32_t scale_byte[kDispatchRowsPerPass][kChunksPerLane];
#pragma unroll
      for (int q = 0; q < kDispatchRowsPerPass; ++q) {
#pragma unroll
        for (int u = 0; u < kChunksPerLane; ++u) {
          const int cc = c + 32 * u;
          const bool load = src[q] != nullptr && cc < code_chunks;
          codes[q][u] = load ? load_streaming(reinterpret_cast<const uint4*>(src[q]) + cc, policy) : zero;
          // The scales follow the H codes; a padding row's zero codes make zeros whatever the scale.
          scale_byte[q][u] = load ? __ldg(reinterpret_cast<const uint8_t*>(src[q]) + p.hidden + cc * kCodesPerChunk / kMxBlock)
                                  : 127u;
        }
      }
#pragma unroll
      for (int q = 0; q < kDispatchRowsPerPass; ++q) {
#pragma unroll
        for (int u = 0; u < kChunksPerLane; ++u) {
          const int cc = c + 32 * u;
          if (dst[q] == nullptr || cc >= code_chunks) continue;
          uint4 first, second;
          dequantize_e4m3x16(codes[q][u], e8m0_to_float(scale_byte[q][u]), first, second);
          store_with_policy(dst[q] + 2 * cc, first, policy);
          store_with_policy(dst[q] + 2 * cc + 1, second, policy);
        }
      }
    }
  });
}

}  // namespace mok::sm90
