// Push-combine and the fixed-order weighted sum.
//
// Down epilogue (push): row r of the down tile is y for (src_rank[r], src_slot[r]); it is rounded to bf16
// and stored straight into that source rank's combine slot `src_slot` (pointer table `combine_ptrs`).
// Every (token, k) slot has exactly one writer in the whole layer, so no atomics touch the data; the
// per-source-rank arrival counter `pushed[s]` counts (row, column block) pairs and reaches
// T_local * K * down_nblocks when every slot of rank s is complete.
//
// Combine (sum): out[s][t] = bf16( sum_k w[t,k] * y[t,k] ), fp32, k ascending, each product rounded
// before the add (no FMA), exactly mok.transfers.sum_over_k's arithmetic.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "epilogue_staging.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

__device__ __forceinline__ uint4 load_l2(const uint4* ptr) {
  // Slots were written by other SMs during this launch: read them from L2, never from a stale L1 line.
  return __ldcg(ptr);
}

// One consumer warpgroup: its 64 rows x 256 output columns -> the source ranks' combine slots.
// `push_count[s]` (shared) collects how many of this tile's rows went to source rank s.
template <class Tiles>
__device__ __forceinline__ void down_epilogue_push(const Sm90MoeParams& p, const Task& t, SharedStorage<Tiles>& s,
                                                   const float (&acc)[128], int consumer_wg, int* push_count) {
  static_assert(Tiles::kBlockN == 2 * Tiles::kHalfN, "the down tile is staged in two halves");
  const int t128 = threadIdx.x & 127;
  const int chunk = t128 & 15;
  const int row_chunks = p.hidden / 8;
  const int slots_per_rank = p.tokens_per_rank * p.top_k;
  const long long table_row0 = static_cast<long long>(t.rank) * p.capacity + static_cast<long long>(t.tile) * Tiles::kBlockM;

  // Destination of the 8 rows this thread copies out (the same rows for both halves).
  uint4* dst_row[8];
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int row = 64 * consumer_wg + (t128 >> 4) + 8 * it;
    const int src_rank = p.src_rank[table_row0 + row];
    const int src_slot = p.src_slot[table_row0 + row];
    dst_row[it] = nullptr;
    if (src_rank >= 0 && src_rank < p.num_ranks && src_slot >= 0 && src_slot < slots_per_rank) {
      dst_row[it] = reinterpret_cast<uint4*>(p.combine_ptrs[src_rank]) + static_cast<long long>(src_slot) * row_chunks;
      if (chunk == 0) atomicAdd(push_count + src_rank, 1);
    } else if (src_rank >= 0 && chunk == 0) {
      record_error(p, kErrBadSchedule, kCtrNone, t.rank, t.tile * Tiles::kBlockM + row, src_rank, src_slot, t.ticket);
    }
  }

#pragma unroll
  for (int half = 0; half < 2; ++half) {
    // 1. y = bf16(acc) for columns [128*half, 128*half + 128) of the tile into the staging rows.
#pragma unroll
    for (int j = 0; j < Tiles::kHalfN / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int d = 4 * (j + half * (Tiles::kHalfN / 8)) + 2 * i;
        stage_pair<Tiles>(s.staging, consumer_wg, j, i, acc[d], acc[d + 1]);
      }
    }
    named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);

    // 2. Push: each row's 256 contiguous bytes into its (token, k) slot on the source rank.
    const int col = t.nblock * Tiles::kBlockN + half * Tiles::kHalfN + chunk * 8;
    if (col < p.hidden) {  // the last column block may reach past H
#pragma unroll
      for (int it = 0; it < 8; ++it) {
        if (dst_row[it] == nullptr) continue;
        const int row = 64 * consumer_wg + (t128 >> 4) + 8 * it;
        dst_row[it][col / 8] = load_staged_chunk<Tiles>(s.staging, row, chunk);
      }
    }
    named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);
  }
}

__device__ __forceinline__ void unpack_bf16x8(const uint4& raw, float (&out)[8]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    out[2 * w] = __uint_as_float(words[w] << 16);
    out[2 * w + 1] = __uint_as_float(words[w] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ uint4 pack_bf16x8(const float (&in)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(in[2 * w], in[2 * w + 1]);
    words[w] = *reinterpret_cast<const uint32_t*>(&pair);
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

// The weighted sum for kCombineTokens tokens of source rank t.rank, all H columns, by `num_threads`
// threads; each thread owns 8 consecutive columns of one token at a time.
template <class Tiles>
__device__ __forceinline__ void combine_block(const Sm90MoeParams& p, const Task& t, int thread, int num_threads) {
  const int source = t.rank;
  const int top_k = p.top_k;
  const int row_chunks = p.hidden / 8;
  const int token0 = t.tile * Tiles::kCombineTokens;
  const int tokens = min(Tiles::kCombineTokens, p.tokens_per_rank - token0);
  const uint4* slots = reinterpret_cast<const uint4*>(p.combine_ptrs[source]);
  const float* weights = reinterpret_cast<const float*>(p.weight_ptrs[source]);
  uint4* out = reinterpret_cast<uint4*>(p.out_ptrs[source]);

  for (int idx = thread; idx < tokens * row_chunks; idx += num_threads) {
    const int token = token0 + idx / row_chunks;
    const int c = idx - (idx / row_chunks) * row_chunks;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[e] = 0.0f;
    for (int k = 0; k < top_k; ++k) {
      const long long slot = static_cast<long long>(token) * top_k + k;
      const float w = __ldg(weights + slot);
      float y[8];
      unpack_bf16x8(load_l2(slots + slot * row_chunks + c), y);
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(w, y[e]));
    }
    out[static_cast<long long>(token) * row_chunks + c] = pack_bf16x8(acc);
  }
}

}  // namespace mok::sm90
