// Epilogue staging: moving a 64 x 128 bf16 slice of a consumer warpgroup's accumulators through shared
// memory so that global stores are whole 16-byte chunks of rows (coalesced), not the 4-byte column pairs
// the wgmma fragment layout gives each thread.
//
// Staging layouts (the same 32 KB; consumer warpgroup w owns rows 64w .. 64w+63, which lie in bytes [16 KB * w,
// 16 KB * (w + 1)) in both layouts, and synchronises only with itself):
// * StagingLayout::kRows (every epilogue that stores rows itself): 128 rows (the tile) x 128 bf16 (256 bytes),
//   16-byte chunk c of row r at chunk c ^ (r & 7).
// * StagingLayout::kTmaBoxes (the TMA stores: h in the bf16 gate/up epilogue, swiglu_epilogue.cuh; down_tma's y,
//   combine.cuh): each warpgroup's 16 KB as two boxes of 64 rows x
//   64 columns, each 64 rows x 128 bytes in the 128-byte swizzle (what a TMA box of 64 bf16 columns reads): chunk c
//   of row r in warpgroup r / 64's box c / 8, row r % 64, at chunk (c % 8) ^ (r & 7). Round 19 measured an earlier
//   box layout (halves across both warpgroups) 2.4% slower than kRows at anchor-2 for the push, whose row reads it
//   serves as well, so only the TMA stores use it.
// The fragments go in with stmatrix (four 8 x 8 blocks per warp instruction, each block's 8 rows in 8 different
// bank groups in either layout), and row reads (8 consecutive chunks of one row per quarter warp) are
// conflict-free too.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "sync.cuh"
#include "tma.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

enum class StagingLayout { kRows, kTmaBoxes };

template <class Tiles, StagingLayout kLayout = StagingLayout::kRows>
__host__ __device__ __forceinline__ uint32_t staging_offset(int row, int chunk) {  // (host: the layout tests)
  if constexpr (kLayout == StagingLayout::kTmaBoxes) {
    return static_cast<uint32_t>((row >> 6) * Tiles::kStagingWarpgroupBytes + (chunk >> 3) * Tiles::kStagingBoxBytes +
                                 (row & 63) * 128 + (((chunk & 7) ^ (row & 7)) << 4));
  } else {
    return static_cast<uint32_t>(row * Tiles::kStagingPitch + ((chunk ^ (row & 7)) << 4));
  }
}

// Two fp32 values as a bf16 pair, each rounded to nearest even; `lo` in the low half (the lower address).
__device__ __forceinline__ uint32_t pack_bf16_pair(float lo, float hi) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// This warp's four 8 x 8 bf16 blocks of column groups j and j + 1 (8 staged columns each), fragment rows i = 0 and
// 1, written with one stmatrix.x4. pairs[g][i] is this thread's pair of column group j + g, fragment row i, exactly
// as the wgmma fragment holds it: row lane / 4 of the block, columns 2 * (lane % 4) + {0, 1}, which is stmatrix's
// register layout. Lane l gives the address of row l % 8 of block l / 8, blocks ordered (j, 0), (j, 1), (j + 1, 0),
// (j + 1, 1). The 8 rows of a block fall in 8 different 16-byte bank groups (the chunk ^ row swizzle), so the
// store is free of bank conflicts; one instruction instead of four 4-byte stores per thread.
template <class Tiles, StagingLayout kLayout = StagingLayout::kRows>
__device__ __forceinline__ void stage_two_groups(uint8_t* staging, int consumer_wg, int j, const uint32_t (&pairs)[2][2]) {
  const int lane = threadIdx.x & 31;
  const int warp = (threadIdx.x & 127) >> 5;
  const int block = lane >> 3;
  const int row = 64 * consumer_wg + 16 * warp + 8 * (block & 1) + (lane & 7);
  const uint32_t address = smem_addr(staging) + staging_offset<Tiles, kLayout>(row, j + (block >> 1));
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
               ::"r"(address), "r"(pairs[0][0]), "r"(pairs[0][1]), "r"(pairs[1][0]), "r"(pairs[1][1])
               : "memory");
}

// A 128-column slice of this thread's fragment into the staging rows, as bf16 pairs: pair_of(d) gives the pair
// of slice columns d and d + 1 for d = 4 * column group + 2 * fragment row (the fragment's own order).
template <class Tiles, StagingLayout kLayout = StagingLayout::kRows, class PairOf>
__device__ __forceinline__ void stage_fragment_pairs(uint8_t* staging, int consumer_wg, PairOf&& pair_of) {
#pragma unroll
  for (int j = 0; j < Tiles::kHalfN / 8; j += 2) {
    uint32_t pairs[2][2];
#pragma unroll
    for (int g = 0; g < 2; ++g) {
#pragma unroll
      for (int i = 0; i < 2; ++i) pairs[g][i] = pair_of(4 * (j + g) + 2 * i);
    }
    stage_two_groups<Tiles, kLayout>(staging, consumer_wg, j, pairs);
  }
}

// Accumulator columns [128 * half, 128 * half + 128) of this thread's 64 x 256 fragment (acc[64 * half ..
// 64 * half + 63]), rounded to bf16 as they are, into the staging rows: the down tile's two halves, or the gate
// (half 0) and up (half 1) columns of a gate/up tile.
template <class Tiles, StagingLayout kLayout = StagingLayout::kRows>
__device__ __forceinline__ void stage_accumulator_half(uint8_t* staging, int consumer_wg, const float (&acc)[128],
                                                       int half) {
  stage_fragment_pairs<Tiles, kLayout>(staging, consumer_wg, [&](int d) {
    return pack_bf16_pair(acc[64 * half + d], acc[64 * half + d + 1]);
  });
}

template <class Tiles>
__device__ __forceinline__ uint4 load_staged_chunk(const uint8_t* staging, int row, int chunk) {
  return *reinterpret_cast<const uint4*>(staging + staging_offset<Tiles>(row, chunk));
}

__device__ __forceinline__ NamedBarrier consumer_wg_barrier(int consumer_wg) {
  return consumer_wg == 0 ? NamedBarrier::kConsumerWG0 : NamedBarrier::kConsumerWG1;
}

// Thread 0 of a consumer warpgroup: its staged 64 rows x 128 columns (StagingLayout::kTmaBoxes) out through `map` as
// two 64 x 64 TMA boxes at (col0 + 64 * box, row), one bulk group. A box at or past column `cols` (the tensor's
// width, a multiple of 64) is not issued. The warpgroup has staged its rows, fenced them for the async proxy
// (fence_proxy_async_shared) and met at its barrier before this.
template <class Tiles>
__device__ __forceinline__ void issue_staged_boxes(const CUtensorMap* map, const uint8_t* staging, int consumer_wg,
                                                   int col0, int cols, int row) {
#pragma unroll
  for (int box = 0; box < 2; ++box) {
    const int col = col0 + 64 * box;
    if (col < cols) {
      tma_store_2d(map, staging + consumer_wg * Tiles::kStagingWarpgroupBytes + box * Tiles::kStagingBoxBytes, col,
                   row);
    }
  }
  bulk_commit_group();
}

// The thread that issued TMA stores: they are written (and so read out of the staging), and ordered before the
// generic release that signals their task (its readers are other SMs: TMA loads of h, generic loads of y).
__device__ __forceinline__ void complete_tma_stores() {
  bulk_wait_group_all();
  // (The PTX ISA puts an implicit generic-async proxy fence after a bulk copy's completion: this one is explicit,
  // belt and braces, not a second fence anyone needs to add elsewhere.)
  fence_proxy_async_global();
}

// After an epilogue's TMA stores (the gate/up task's h, a down task's y blocks): complete_tma_stores by thread 0 of
// the warpgroup, which issued them, before the task's barrier or its warp's arrival; the warpgroup's other threads
// meet it there before they touch the staging (which the warpgroup's next epilogue may use).
__device__ __forceinline__ void finish_tma_stores(int consumer_wg) {
  if ((threadIdx.x & 127) == 0) complete_tma_stores();
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);  // the staging is free for the next task's epilogue
}

}  // namespace mok::sm90
