// Gate/up epilogue: SwiGLU on the accumulators, h (bf16) written to the ring.
//
// The gate/up tile's 256 accumulator columns are 128 gate columns (B rows 0..127, from w_gate) followed by
// the same 128 columns of up (B rows 128..255, from w_up), so gate column c and up column c sit in the
// same thread: d[4*j + 2*i + c] and d[64 + 4*j + 2*i + c].
//
// Rounding points follow mok/swiglu.py: gate and up are rounded to bf16 first (what the reference stores),
// then h = silu(gate) * up = (gate * sigmoid(gate)) * up in fp32, then h is rounded to bf16. The sigmoid
// itself uses the hardware approximations (see swiglu() below).
#pragma once

#include <cuda_bf16.h>

#include "epilogue_staging.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

__device__ __forceinline__ float round_to_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// NOTE: the sigmoid uses the hardware approximations (ex2.approx through __expf, a fast reciprocal through
// __fdividef: a few ulp of fp32, against IEEE expf and a correctly rounded division in mok/swiglu.py). The
// epilogue runs while the tensor cores wait, and the exact forms cost 2.9-5% of the kernel on the H200
// (round 7). The rounding points are unchanged; h differs from the exact formula by one bf16 ulp only where
// the fp32 value lies within a few fp32 ulp of a bf16 rounding boundary. For large |gate| the reciprocal of
// an infinite denominator is 0, as in the exact form.
__device__ __forceinline__ float swiglu(float gate_acc, float up_acc) {
  const float gate = round_to_bf16(gate_acc);
  const float up = round_to_bf16(up_acc);
  const float sigmoid = __fdividef(1.0f, 1.0f + __expf(-gate));
  return (gate * sigmoid) * up;
}

// Training: gate and up of this thread's fragment, rounded to bf16, straight from the registers into the saved
// rows (row = the schedule row, gate at column c, up at I + c): the Triton backward reads them instead of
// running the gate/up GEMM again. Each store is a bf16 pair (4 bytes); a warp's store covers 8 rows x 16
// bytes, which L2 merges into whole lines before DRAM sees them, and nothing waits on these stores until the
// task's release at its end.
template <class Tiles>
__device__ __forceinline__ void save_gate_up_fragment(const Sm90MoeParams& p, const Task& t, const float (&acc)[128],
                                                      int consumer_wg) {
  const long long row_stride = 2LL * p.intermediate;
  const long long table_row0 = static_cast<long long>(t.rank) * p.capacity + static_cast<long long>(t.tile) * Tiles::kBlockM;
  const int col0 = t.nblock * Tiles::kHalfN + 2 * (threadIdx.x & 3);
  __nv_bfloat16* saved = static_cast<__nv_bfloat16*>(p.saved_gate_up);
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    __nv_bfloat16* row = saved + (table_row0 + fragment_row(consumer_wg, i)) * row_stride;
#pragma unroll
    for (int j = 0; j < Tiles::kHalfN / 8; ++j) {
      const int col = col0 + 8 * j;
      const int g = 4 * j + 2 * i;
      if (col < p.intermediate) {  // the last column block may reach past I (I % 128 == 64)
        *reinterpret_cast<__nv_bfloat162*>(row + col) = __floats2bfloat162_rn(acc[g], acc[g + 1]);
        *reinterpret_cast<__nv_bfloat162*>(row + p.intermediate + col) =
            __floats2bfloat162_rn(acc[64 + g], acc[64 + g + 1]);
      }
    }
  }
}

// One consumer warpgroup: its 64 rows x 128 h columns of the tile -> ring h rows (and, when training, its gate
// and up values -> the saved rows).
template <class Tiles>
__device__ __forceinline__ void gate_up_epilogue(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                                 SharedStorage<Tiles>& s, const float (&acc)[128], int consumer_wg) {
  static_assert(Tiles::kHalfN == 128, "gate/up tile = 128 gate + 128 up columns");
  if (p.ablate & kAblateEpilogue) return;  // timing ablation: the mainloop's cost alone
  if (p.saved_gate_up != nullptr) save_gate_up_fragment<Tiles>(p, t, acc, consumer_wg);
  // 1. SwiGLU in registers, bf16 pairs into the staging tile.
#pragma unroll
  for (int j = 0; j < Tiles::kHalfN / 8; ++j) {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int g = 4 * j + 2 * i;
      const float h0 = swiglu(acc[g], acc[64 + g]);
      const float h1 = swiglu(acc[g + 1], acc[64 + g + 1]);
      stage_pair<Tiles>(s.staging, consumer_wg, j, i, h0, h1);
    }
  }
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);

  // 2. Rows out to the ring: 64 rows x 16 chunks of 16 bytes, 8 per thread, each row 256 contiguous bytes.
  const int t128 = threadIdx.x & 127;
  const int chunk = t128 & 15;
  const int col = t.nblock * Tiles::kHalfN + chunk * 8;
  const long long ring_row0 =
      static_cast<long long>(t.rank) * p.ring_rows + ring_row_of_tile(v, t.tile, Tiles::kBlockM);
  uint4* ring_h = reinterpret_cast<uint4*>(p.ring_h);
  const int row_chunks = p.intermediate / 8;
  if (col < p.intermediate) {  // the last column block may reach past I (I % 128 == 64)
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      const int row = 64 * consumer_wg + (t128 >> 4) + 8 * it;
      const uint4 value = load_staged_chunk<Tiles>(s.staging, row, chunk);
      ring_h[(ring_row0 + row) * row_chunks + col / 8] = value;
    }
  }
  // The staging rows are rewritten by this warpgroup's next epilogue.
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);
}

}  // namespace mok::sm90
