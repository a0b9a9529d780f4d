// Can TMA gather a GEMM tile's A rows on Hopper, one 128-byte box per row, fast enough to feed wgmma?
//
// The megakernel's gather mode copies a tile's 128 token rows into the swizzled A stage with cp.async from the
// whole producer warpgroup; ring mode copies them into the ring first (dispatch tasks on the consumer
// warpgroups) and loads 128-row boxes by TMA. A third way would be 128 TMA loads of {64 columns x 1 row} per K
// block from a tensor map over the token rows: no dispatch tasks, no generic-proxy writes, and one producer
// warp instead of four. This probe answers the two questions that decide it, without touching the kernel:
//
//   1. placement: does a 1-row box written at stage + 128 * r land exactly where a 128-row box would put row r
//      under the 128-byte swizzle (i.e. is the swizzle a function of the shared-memory address)?
//   2. rate: the producer loop alone (no wgmma; the consumer warp holds each stage for --spin cycles, about a
//      K block's wgmma time at 0 .. 1200) in four modes, 132 CTAs, anchor-5's sizes:
//        box      A = one 128-row box from a contiguous ring (ring mode's load)
//        rows32   A = 128 one-row boxes, issued by the 32 lanes of one warp (4 each)
//        rows1    A = 128 one-row boxes, issued by one thread
//        cpasync  A = the current gather mode: 128 threads x 8 cp.async of 16 B, .noinc arrivals
//      B is one 256-row box from a weight matrix in every mode (48 KB per stage in all).
//
// Build and run (H200):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
//     -o build/tma_row_gather_probe experiments/tma_row_gather_probe.cu && build/tma_row_gather_probe
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "sm90_probe_util.cuh"  // with the kernel's mbarrier, cp.async and TMA helpers (mok/sync.cuh, mok/tma.cuh)

using namespace probe;  // the shared stage ring and helpers, and the kernel's primitives (sm90_probe_util.cuh)
constexpr int kProducerThreads = 128;
constexpr int kThreads = kProducerThreads + 32;  // producer warpgroup + one consumer warp

enum Mode { kBox = 0, kRows32 = 1, kRows1 = 2, kCpAsync = 3 };
const char* kModeNames[] = {"box", "rows32", "rows1", "cpasync"};

struct Problem {
  const __nv_bfloat16* x;  // [x_rows, H] token rows (cp.async source)
  int hidden;
  int num_rowsets;
  const int* rowsets;      // [num_rowsets, 128] token row of each tile row
  int tasks_per_cta;
  int col_blocks;          // tasks of one row set in a row (the gate/up column blocks of a row tile)
  int spin;                // consumer cycles per K block
  int mode;
};

__global__ void __launch_bounds__(kThreads, 1)
    probe_kernel(Problem p, const __grid_constant__ CUtensorMap ring_map, const __grid_constant__ CUtensorMap x_row_map,
                 const __grid_constant__ CUtensorMap w_map, unsigned long long* sink) {
  extern __shared__ uint8_t raw[];
  Shared& s = *reinterpret_cast<Shared*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      mbar_init(&s.full[i], p.mode == kCpAsync ? 1 + kProducerThreads : 1);
      mbar_init(&s.empty[i], 1);
    }
    mok::sm90::fence_mbarrier_init();
  }
  __syncthreads();
  const int kblocks = p.hidden / kBlockK;
  uint32_t stage = 0, phase = 0;
  auto advance = [&] {
    if (++stage == kStages) { stage = 0; phase ^= 1u; }
  };
  if (tid < kProducerThreads) {
    const int lane = tid & 31;
    for (int j = 0; j < p.tasks_per_cta; ++j) {
      const int task = blockIdx.x + j * gridDim.x;
      const int rowset = (task / p.col_blocks) % p.num_rowsets;
      const int b_row = (task % p.col_blocks) * kBRows;
      asm volatile("bar.sync 1, %0;" ::"n"(kProducerThreads));  // last task's reads of s.rows are done
      s.rows[tid] = p.rowsets[rowset * kRows + tid];
      asm volatile("bar.sync 1, %0;" ::"n"(kProducerThreads));
      for (int kb = 0; kb < kblocks; ++kb) {
        const int k0 = kb * kBlockK;
        mbar_wait_spin(&s.empty[stage], phase ^ 1u);
        if (p.mode == kCpAsync) {
          if (tid == 0) {
            mbar_arrive_expect_tx(&s.full[stage], kBBytes);
            tma_load_2d(s.b[stage], &w_map, &s.full[stage], k0, b_row);
          }
          probe::gather_kblock(smem_addr(s.a[stage]), reinterpret_cast<const char*>(p.x), p.hidden, s.rows, kb, tid);
          cp_async_mbar_arrive_noinc(&s.full[stage]);
        } else if (tid < 32) {
          if (lane == 0) {
            mbar_arrive_expect_tx(&s.full[stage], kABytes + kBBytes);
            tma_load_2d(s.b[stage], &w_map, &s.full[stage], k0, b_row);
          }
          if (p.mode == kBox) {
            if (lane == 0) tma_load_2d(s.a[stage], &ring_map, &s.full[stage], k0, rowset * kRows);
          } else if (p.mode == kRows32) {
            __syncwarp();
#pragma unroll
            for (int i = 0; i < kRows / 32; ++i) {
              const int r = lane + 32 * i;
              tma_load_2d(s.a[stage] + r * 128, &x_row_map, &s.full[stage], k0, s.rows[r]);
            }
          } else if (lane == 0) {
            for (int r = 0; r < kRows; ++r) tma_load_2d(s.a[stage] + r * 128, &x_row_map, &s.full[stage], k0, s.rows[r]);
          }
        }
        advance();
      }
    }
  } else if (tid == kProducerThreads) {
    unsigned long long acc = 0;
    for (int j = 0; j < p.tasks_per_cta; ++j) {
      for (int kb = 0; kb < kblocks; ++kb) {
        mbar_wait_spin(&s.full[stage], phase);
        if (p.mode == kCpAsync) mok::sm90::fence_proxy_async_shared();
        acc += s.a[stage][(kb * 131) % kABytes] + s.b[stage][(kb * 257) % kBBytes];
        const long long t0 = clock64();
        while (clock64() - t0 < p.spin) {
        }
        mbar_arrive(&s.empty[stage]);
        advance();
      }
    }
    if (acc == 0xFFFFFFFFull) sink[0] = acc;  // keeps the reads
  }
}

// Placement check: one K block of row set 0 through 128 one-row boxes, the shared stage copied out as is.
__global__ void placement_kernel(const __grid_constant__ CUtensorMap x_row_map, const int* rows, int kb, uint8_t* out) {
  extern __shared__ uint8_t raw[];
  Shared& s = *reinterpret_cast<Shared*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  if (threadIdx.x == 0) {
    mbar_init(&s.full[0], 1);
    mok::sm90::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(&s.full[0], kABytes);
    for (int r = 0; r < kRows; ++r) tma_load_2d(s.a[0] + r * 128, &x_row_map, &s.full[0], kb * kBlockK, rows[r]);
  }
  mbar_wait_spin(&s.full[0], 0);
  for (int i = threadIdx.x; i < kABytes; i += blockDim.x) out[i] = s.a[0][i];
}

int main(int argc, char** argv) {
  // anchor-5: 8192 tokens x top-8 over 64 experts, H 7168, gate/up 2I = 4096 columns = 16 blocks of 256.
  const int tokens = 8192, hidden = 7168, col_blocks = 16, num_rowsets = 512;
  const int ctas = 132, tasks_per_cta = 16, iters = 5;
  const std::vector<int> rowsets = probe::random_tile_rows(tokens, num_rowsets, 1234);
  std::mt19937 rng(1234);
  std::vector<uint16_t> hx((size_t)tokens * hidden);
  for (auto& v : hx) v = static_cast<uint16_t>(rng());
  void *x, *ring, *w;
  int* d_rowsets;
  unsigned long long* sink;
  uint8_t* d_stage;
  PROBE_CHECK(cudaMalloc(&x, hx.size() * 2));
  PROBE_CHECK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMalloc(&ring, (size_t)num_rowsets * kRows * hidden * 2));
  PROBE_CHECK(cudaMemset(ring, 1, (size_t)num_rowsets * kRows * hidden * 2));
  PROBE_CHECK(cudaMalloc(&w, (size_t)col_blocks * kBRows * hidden * 2));
  PROBE_CHECK(cudaMemset(w, 2, (size_t)col_blocks * kBRows * hidden * 2));
  PROBE_CHECK(cudaMalloc(&d_rowsets, rowsets.size() * 4));
  PROBE_CHECK(cudaMemcpy(d_rowsets, rowsets.data(), rowsets.size() * 4, cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMalloc(&sink, 8));
  PROBE_CHECK(cudaMalloc(&d_stage, kABytes));
  CUtensorMap ring_map = probe::encode_bf16_2d(ring, (uint64_t)num_rowsets * kRows, hidden, kRows);
  CUtensorMap x_row_map = probe::encode_bf16_2d(x, tokens, hidden, 1);
  CUtensorMap w_map = probe::encode_bf16_2d(w, (uint64_t)col_blocks * kBRows, hidden, kBRows);
  const size_t smem_bytes = sizeof(Shared) + 1024;
  PROBE_CHECK(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(placement_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));

  // 1. placement, at two K blocks
  int bad = 0;
  for (int kb : {0, 57}) {
    placement_kernel<<<1, 128, smem_bytes>>>(x_row_map, d_rowsets, kb, d_stage);
    PROBE_CHECK(cudaGetLastError());
    std::vector<uint8_t> got(kABytes);
    PROBE_CHECK(cudaMemcpy(got.data(), d_stage, kABytes, cudaMemcpyDeviceToHost));
    for (int r = 0; r < kRows; ++r)
      for (int c = 0; c < 8; ++c) {
        const uint8_t* want = reinterpret_cast<const uint8_t*>(hx.data() + (size_t)rowsets[r] * hidden + kb * 64) + c * 16;
        if (std::memcmp(got.data() + r * 128 + ((c ^ (r & 7)) << 4), want, 16) != 0) ++bad;
      }
  }
  std::printf("placement: %d of %d 16-byte chunks misplaced (one-row boxes at stage + 128 r, SW128)\n", bad, 2 * kRows * 8);

  // 2. rate
  std::printf("%-8s %6s %10s %14s %12s\n", "mode", "spin", "ms", "ns/kblock/SM", "A+B GB/s");
  for (int spin : {0, 600, 900, 1200}) {
    for (int mode = 0; mode < 4; ++mode) {
      Problem p{reinterpret_cast<const __nv_bfloat16*>(x), hidden, num_rowsets, d_rowsets, tasks_per_cta, col_blocks,
                spin, mode};
      const double med = probe::median_ms_rotated(1, iters, [&](int) {
        probe_kernel<<<ctas, kThreads, smem_bytes>>>(p, ring_map, x_row_map, w_map, sink);
      })[0];
      const double kblocks = (double)tasks_per_cta * (hidden / kBlockK);
      const double bytes = (double)ctas * kblocks * (kABytes + kBBytes);
      std::printf("%-8s %6d %10.3f %14.1f %12.0f\n", kModeNames[mode], spin, med, med * 1e6 / kblocks,
                  bytes / (med * 1e-3) / 1e9);
    }
  }
  return bad != 0;
}
