// The weighted sum as a kernel of its own (Sm90MoeProblem::sum_kernel): launched on the same stream right after the
// megakernel, which then runs no combine tasks. Same arithmetic as the megakernel's combine tasks (combine.cuh):
// out[s][t] = bf16( sum_k w[t,k] * y[t,k] ), fp32, k ascending, each product rounded before the add (no FMA), so the
// same bits.
//
// Why a second kernel: in the megakernel the sum is the layer's tail (it waits for every push of its source rank),
// run by one CTA of eight consumer warps per SM in tasks of 16 tokens, each task filling its table and meeting at
// barriers: about 3.6 TB/s at anchor-2, where SonicMoE's separate sum reads 4.1-4.3 (mok/cuda/ROUNDS.md, round 32; a
// deeper in-kernel loop through the idle stages lost). Here three CTAs share each SM, 24 warps with 96 KB of loads in
// flight, and the kernel boundary replaces the combine tasks' counter waits (nothing runs in the tail beside the sum
// anyway: every push must have landed). Round 34: 4.15 TB/s at anchor-2, the forward 0.977x the time (anchor-1
// 0.959x); with the pushed slots of ring mode no faster than the combine tasks (0.999-1.006x at anchors 3-5).
//
// One CTA per (kSumTokens consecutive tokens, source rank). First the CTA's (token, k) rows and router weights go
// into a shared-memory table (down_tma: the row of y through the inverse map y_rows, checked against the schedule
// tables by combine.cuh's checked_y_row, as the combine tasks check it; otherwise the (token, k) slot itself), then each thread sums kSumItems
// items of (token, 16-byte chunk) at a time, k ascending.
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "combine.cuh"
#include "sync.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

constexpr int kSumThreads = 256;
// CTAs per SM the registers must allow (80 registers each): 24 warps, each thread with kSumItems * kSumKUnroll = 8
// loads of 16 bytes in flight, about 96 KB per SM. NOTE: with no minimum in __launch_bounds__ ptxas gave the kernel
// 48 registers and issued each load only after the previous one's sum: one load in flight per thread (checked in the
// SASS; tests/test_cuda_compile.py counts the batch).
constexpr int kSumMinBlocks = 3;
constexpr int kSumTokens = 4;   // tokens per CTA: at H = 4096, 2,048 items for 256 threads
constexpr int kSumItems = 2;    // independent items per thread
constexpr int kSumKUnroll = 4;  // k per batch of loads: kSumItems * kSumKUnroll loads of 16 bytes in flight per thread
constexpr int kSumMaxTopK = 64; // the table's size (kSumTokens * kSumMaxTopK entries of 8 bytes)

// Grid (ceil(T_local / kSumTokens), R): blockIdx.y is the source rank (emulated ranks only: the host checks).
__global__ void __launch_bounds__(kSumThreads, kSumMinBlocks) sm90_moe_sum_kernel(const __grid_constant__ Sm90MoeParams params) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const Sm90MoeParams& p = params;
  __shared__ CombineRow table[kSumTokens * kSumMaxTopK];
  const int source = static_cast<int>(blockIdx.y);
  const int first = static_cast<int>(blockIdx.x) * kSumTokens;
  const int tokens = min(kSumTokens, p.tokens_per_rank - first);
  const int top_k = p.top_k;
  const bool from_y = p.down_tma != 0;
  const float* weights = reinterpret_cast<const float*>(p.weight_ptrs[source]);

  // ---- every row of the source rank was pushed: the count the combine tasks would have waited for ----
  // (The megakernel's counters stay until the next launch's reset. Fewer means a lost row, whose slot the sums below
  // read stale: the launch is reported as failed, where the combine tasks would have timed out waiting for it.)
  if (threadIdx.x == 0) {
    const int expected = p.tokens_per_rank * p.top_k * p.down_nblocks;
    const int seen = __ldcg(p.counters + p.ctr.pushed + source);
    if (seen < expected) record_error(p, kErrBadSchedule, kCtrPushed, source, -1, seen, expected, -1);
  }

  // ---- the table: this CTA's tokens are consecutive, so entry i is slot first * K + i ----
  for (int i = static_cast<int>(threadIdx.x); i < tokens * top_k; i += kSumThreads) {
    const int local = i / top_k;
    const int k = i - local * top_k;
    const long long slot = static_cast<long long>(first) * top_k + i;
    const int row = from_y ? checked_y_row(p, source, first + local, k, -1) : static_cast<int>(slot);
    table[i] = CombineRow{row, __ldg(weights + slot)};
  }
  __syncthreads();

  // ---- the sums: item idx is (token idx / row_chunks, chunk idx % row_chunks) of this CTA's tokens ----
  const int row_chunks = p.hidden / 8;
  const int total = tokens * row_chunks;
  const uint4* rows = reinterpret_cast<const uint4*>(from_y ? p.y : reinterpret_cast<const void*>(p.combine_ptrs[source]));
  for (int base = static_cast<int>(threadIdx.x); base < total; base += kSumThreads * kSumItems) {
    int local[kSumItems];
    int chunk[kSumItems];
    float acc[kSumItems][8];
#pragma unroll
    for (int u = 0; u < kSumItems; ++u) {
      // An item past the end redoes item 0 (always valid) and is not stored: no branch in the k loop.
      const int idx = base + u * kSumThreads < total ? base + u * kSumThreads : base;
      local[u] = idx / row_chunks;
      chunk[u] = idx - local[u] * row_chunks;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[u][e] = 0.0f;
    }
    // kSumKUnroll k at a time: every (k, item) row load of the batch is issued before the first is used.
    int k = 0;
    for (; k + kSumKUnroll <= top_k; k += kSumKUnroll) {
      uint4 raw[kSumKUnroll][kSumItems];
      float w[kSumKUnroll][kSumItems];
      int row[kSumKUnroll][kSumItems];
#pragma unroll
      for (int j = 0; j < kSumKUnroll; ++j) {
#pragma unroll
        for (int u = 0; u < kSumItems; ++u) {
          const CombineRow entry = table[local[u] * top_k + k + j];
          w[j][u] = entry.weight;
          row[j][u] = entry.row;
        }
      }
#pragma unroll
      for (int j = 0; j < kSumKUnroll; ++j) {
#pragma unroll
        for (int u = 0; u < kSumItems; ++u) {
          raw[j][u] = load_streaming(rows + static_cast<long long>(row[j][u]) * row_chunks + chunk[u]);
        }
      }
#pragma unroll
      for (int j = 0; j < kSumKUnroll; ++j) {
#pragma unroll
        for (int u = 0; u < kSumItems; ++u) accumulate_weighted(acc[u], w[j][u], raw[j][u]);
      }
    }
    for (; k < top_k; ++k) {  // the last top_k % 4
#pragma unroll
      for (int u = 0; u < kSumItems; ++u) {
        const CombineRow entry = table[local[u] * top_k + k];
        accumulate_weighted(acc[u], entry.weight, __ldg(rows + static_cast<long long>(entry.row) * row_chunks + chunk[u]));
      }
    }
    // The output row pointer is read here, not kept across the loop: held there it was spilled (8 bytes).
    uint4* out = reinterpret_cast<uint4*>(p.out_ptrs[source]) + static_cast<long long>(first) * row_chunks;
#pragma unroll
    for (int u = 0; u < kSumItems; ++u) {
      if (base + u * kSumThreads < total) out[base + u * kSumThreads] = pack_bf16x8(acc[u]);
    }
  }
#endif
}

}  // namespace mok::sm90
