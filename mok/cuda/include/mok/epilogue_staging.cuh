// Epilogue staging: moving a 64 x 128 bf16 slice of a consumer warpgroup's accumulators through shared
// memory so that global stores are whole 16-byte chunks of rows (coalesced), not the 4-byte column pairs
// the wgmma fragment layout gives each thread.
//
// Staging layout: 128 rows (the tile) x 128 bf16 (256 bytes), 16-byte chunk c of row r stored at chunk
// c ^ (r & 7). Fragment writes (8 rows x 4 column pairs per warp instruction) then hit 32 different banks,
// and row reads (8 consecutive chunks of one row per quarter warp) too. Consumer warpgroup w owns rows
// 64w .. 64w+63 and synchronises only with itself.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "sync.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

template <class Tiles>
__device__ __forceinline__ uint32_t staging_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * Tiles::kStagingPitch + ((chunk ^ (row & 7)) << 4));
}

// The fragment row of accumulator element d[4*j + 2*i + c] for this thread, within the 128-row tile.
__device__ __forceinline__ int fragment_row(int consumer_wg, int i) {
  const int t = threadIdx.x & 127;
  return 64 * consumer_wg + 16 * (t >> 5) + ((t & 31) >> 2) + 8 * i;
}

// Write one bf16 pair (columns 8*j + 2*(lane%4) + {0,1} of the staged 128) for fragment row i.
template <class Tiles>
__device__ __forceinline__ void stage_pair(uint8_t* staging, int consumer_wg, int j, int i, float lo, float hi) {
  const int row = fragment_row(consumer_wg, i);
  const uint32_t offset = staging_offset<Tiles>(row, j) + ((threadIdx.x & 3) << 2);
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);  // .x (lo) at the lower address
  *reinterpret_cast<__nv_bfloat162*>(staging + offset) = pair;
}

template <class Tiles>
__device__ __forceinline__ uint4 load_staged_chunk(const uint8_t* staging, int row, int chunk) {
  return *reinterpret_cast<const uint4*>(staging + staging_offset<Tiles>(row, chunk));
}

__device__ __forceinline__ NamedBarrier consumer_wg_barrier(int consumer_wg) {
  return consumer_wg == 0 ? NamedBarrier::kConsumerWG0 : NamedBarrier::kConsumerWG1;
}

}  // namespace mok::sm90
