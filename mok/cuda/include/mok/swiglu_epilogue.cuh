// Gate/up epilogue: SwiGLU on the accumulators, h (bf16) written to the ring.
//
// The gate/up tile's 256 accumulator columns are 128 gate columns (B rows 0..127, from w_gate) followed by
// the same 128 columns of up (B rows 128..255, from w_up), so gate column c and up column c sit in the
// same thread: d[4*j + 2*i + c] and d[64 + 4*j + 2*i + c].
//
// Rounding points follow mok/swiglu.py: gate and up are rounded to bf16 first (what the reference stores),
// then h = silu(gate) * up = (gate * sigmoid(gate)) * up in fp32, then h is rounded to bf16. The sigmoid
// itself uses the hardware approximations (see swiglu() below). MXFP8 (p.mxfp8): the bf16 h is then rounded
// through MXFP8 along I (mxfp8.cuh), as the Triton MXFP8 gate/up epilogue quantizes it for the down GEMM.
#pragma once

#include <cuda_bf16.h>

#include "epilogue_staging.cuh"
#include "mxfp8.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "tma.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

// a and b rounded to bf16 (nearest even), as two __float2bfloat16_rn would round them, by one packed conversion
// (F2FP, as pack_bf16_pair) and two integer ops instead of two F2F conversions. On Hopper an F2F.BF16.F32 runs at the
// MUFU's rate (about 16 per clock per SM, experiments/swiglu_epilogue_probe.cu), so two of them per element cost as
// much as the sigmoid's ex2 and rcp together; the packed form made the kernel 0.3-1.7% faster (mok/cuda/ROUNDS.md,
// round 40).
__device__ __forceinline__ float2 round_pair_to_bf16(float a, float b) {
  const uint32_t rounded = pack_bf16_pair(a, b);  // a in the low half
  return make_float2(__uint_as_float(rounded << 16), __uint_as_float(rounded & 0xFFFF0000u));
}

// NOTE: the sigmoid uses the hardware approximations (ex2.approx through __expf, a fast reciprocal through
// __fdividef: a few ulp of fp32, against IEEE expf and a correctly rounded division in mok/swiglu.py). The
// epilogue runs while the tensor cores wait, and the exact forms cost 2.0-5.0% of the kernel on the H200
// (round 7). The rounding points are unchanged; h differs from the exact formula by one bf16 ulp only where
// the fp32 value lies within a few fp32 ulp of a bf16 rounding boundary. For large |gate| the reciprocal of
// an infinite denominator is 0, as in the exact form.
__device__ __forceinline__ float swiglu(float gate_acc, float up_acc) {
  const float2 rounded = round_pair_to_bf16(gate_acc, up_acc);
  const float gate = rounded.x;
  const float up = rounded.y;
  const float sigmoid = __fdividef(1.0f, 1.0f + __expf(-gate));
  return (gate * sigmoid) * up;
}

// This warpgroup's 64 staged rows (128 bf16 columns each) out to global memory, 16 contiguous bytes per lane
// (a warp writes two whole 256-byte row pieces per instruction): row r of the tile goes to dst row `row0 + r`,
// columns [col0, col0 + 128) of a row of `row_chunks` 16-byte chunks; columns at or past `valid_cols` are
// skipped (the last column block may reach past I when I % 128 == 64). Ends with the warpgroup's barrier: the
// staging rows may be rewritten after it.
template <class Tiles>
__device__ __forceinline__ void store_staged_rows(SharedStorage<Tiles>& s, int consumer_wg, uint4* dst, long long row0,
                                                  long long row_chunks, int col0, int valid_cols) {
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);  // the staged pairs are all written
  const int t128 = threadIdx.x & 127;
  const int chunk = t128 & 15;
  if (chunk * 8 < valid_cols) {
    const int dst_chunk = col0 / 8 + chunk;  // col0 is a multiple of 8 (I % 64 == 0)
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      const int row = 64 * consumer_wg + (t128 >> 4) + 8 * it;
      dst[(row0 + row) * row_chunks + dst_chunk] = load_staged_chunk<Tiles>(s.staging, row, chunk);
    }
  }
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);  // every row read: the staging is free again
}

// MXFP8: h = bf16(SwiGLU) of this thread's fragment, rounded through MXFP8 per block of 32 columns of a row, into
// the staging tile. A block (accumulator column groups j = 4b .. 4b + 3) of fragment row i spans the four lanes
// of a quad (lane / 4 equal), 8 values each, so its amax is the lane's own maximum and two xor-shuffles.
template <class Tiles>
__device__ __forceinline__ void stage_h_mx_rounded(SharedStorage<Tiles>& s, const float (&acc)[128], int consumer_wg) {
  static_assert(kMxBlock == 32, "a block = 4 column groups of 8");
#pragma unroll
  for (int b = 0; b < Tiles::kHalfN / kMxBlock; ++b) {
    uint32_t pairs[4][2];  // [column group 4b + jj][fragment row i]
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float h[8];
      float amax = 0.0f;
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const int g = 4 * (4 * b + jj) + 2 * i;
        const float2 rounded = round_pair_to_bf16(swiglu(acc[g], acc[64 + g]), swiglu(acc[g + 1], acc[64 + g + 1]));
        h[2 * jj] = rounded.x;
        h[2 * jj + 1] = rounded.y;
        amax = fmaxf(amax, fmaxf(mx_magnitude(h[2 * jj]), mx_magnitude(h[2 * jj + 1])));
      }
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 1));
      amax = fmaxf(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, 2));
      const int e = mx_scale_exponent(amax);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
        const float2 v = mx_round_trip(h[2 * jj], h[2 * jj + 1], e);
        pairs[jj][i] = pack_bf16_pair(v.x, v.y);
      }
    }
#pragma unroll
    for (int jj = 0; jj < 4; jj += 2) {
      const uint32_t two[2][2] = {{pairs[jj][0], pairs[jj][1]}, {pairs[jj + 1][0], pairs[jj + 1][1]}};
      stage_two_groups<Tiles>(s.staging, consumer_wg, 4 * b + jj, two);
    }
  }
}

// The warpgroup's 64 h rows x 128 columns, staged as two TMA boxes (StagingLayout::kTmaBoxes), into ring h rows
// [row0, row0 + 64) by two TMA stores from its thread 0 (a box at or past I is not issued: I is a multiple of 64).
// The consumers issue two stores instead of 16 KB of their own (round 20). finish_tma_stores then waits for them:
// the down tasks that read h (TMA loads, other SMs) are released by this task's signal.
template <class Tiles>
__device__ __forceinline__ void store_h_tma(const Sm90MoeParams& p, SharedStorage<Tiles>& s, int consumer_wg,
                                            long long row0, int col0) {
  fence_proxy_async_shared();  // this thread's staged pairs, visible to the TMA (async proxy) that reads them
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);
  if ((threadIdx.x & 127) == 0 && !(p.ablate & kAblateStores)) {
    issue_staged_boxes<Tiles>(&p.tmap_h_store, s.staging, consumer_wg, col0, p.intermediate, static_cast<int>(row0));
  }
  finish_tma_stores(consumer_wg);
}

// One consumer warpgroup: its 64 rows x 128 h columns of the tile -> ring h rows. When training
// (p.saved_gate_up), first its gate and then its up values, rounded to bf16, -> the saved rows (row = the
// schedule row; gate at column c, up at I + c), which the Triton backward reads instead of running the gate/up
// GEMM again. All three go through the staging tile: the saved rows (and MXFP8's h) so that every global store is 16
// contiguous bytes per lane (stores of the 4-byte fragment pairs straight from registers would be 8 times as many L2
// writes), bf16 h so that two TMA boxes per warpgroup can carry it (store_h_tma).
//
// `h_by_store_warp` (bf16 with the store warps, run_consumer_task): the warpgroup only stages and fences its h rows;
// the caller hands the staging to its store warp, which issues the two TMA stores and waits for them
// (store_warps.cuh), so the consumers go on to their next mainloop instead of waiting for h's global writes.
template <class Tiles>
__device__ __forceinline__ void gate_up_epilogue(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                                 SharedStorage<Tiles>& s, const float (&acc)[128], int consumer_wg,
                                                 bool h_by_store_warp) {
  static_assert(Tiles::kHalfN == 128, "gate/up tile = 128 gate + 128 up columns");
  if (p.ablate & kAblateEpilogue) return;  // timing ablation: the mainloop's cost alone
  const int col0 = t.nblock * Tiles::kHalfN;
  // Timing ablation kAblateStores: everything but the global stores (no column is valid).
  const int valid_cols = (p.ablate & kAblateStores) ? 0 : p.intermediate - col0;
  if (p.saved_gate_up != nullptr) {
    const long long row0 =
        static_cast<long long>(own_slot(p, t.rank)) * p.capacity + static_cast<long long>(t.tile) * Tiles::kBlockM;
    const long long row_chunks = p.intermediate / 4;  // 2I bf16 per saved row
    uint4* saved = static_cast<uint4*>(p.saved_gate_up);
#pragma unroll
    for (int part = 0; part < 2; ++part) {  // 0: gate (accumulator columns 0..127), 1: up (128..255)
      stage_accumulator_half<Tiles>(s.staging, consumer_wg, acc, part);
      store_staged_rows<Tiles>(s, consumer_wg, saved, row0, row_chunks, part * p.intermediate + col0, valid_cols);
    }
  }
  // SwiGLU in registers, bf16 pairs into the staging tile, rows out to the ring: by TMA (bf16), or by the
  // consumers' own row stores (MXFP8, whose rounding stages the rows in the row layout).
  const long long ring_row0 = task_ring_row0(p, v, t, Tiles::kBlockM);
  if (p.mxfp8) {
    stage_h_mx_rounded<Tiles>(s, acc, consumer_wg);
    store_staged_rows<Tiles>(s, consumer_wg, reinterpret_cast<uint4*>(p.ring_h), ring_row0, p.intermediate / 8, col0,
                             valid_cols);
  } else {  // gate column g is acc[g], its up column acc[64 + g]
    stage_fragment_pairs<Tiles, StagingLayout::kTmaBoxes>(s.staging, consumer_wg, [&](int g) {
      return pack_bf16_pair(swiglu(acc[g], acc[64 + g]), swiglu(acc[g + 1], acc[64 + g + 1]));
    });
    if (h_by_store_warp) {
      fence_proxy_async_shared();  // this thread's staged pairs, visible to the TMA the store warp issues
      return;
    }
    store_h_tma<Tiles>(p, s, consumer_wg, ring_row0 + 64 * consumer_wg, col0);
  }
}

}  // namespace mok::sm90
