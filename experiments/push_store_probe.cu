// How fast can one SM push a down tile's rows to their scattered combine slots, and with how many warps?
//
// Round 14's task timeline put anchor-2's down tasks at about 2 us of mainloop and 3.5 us (gather mode: the consumer
// warpgroups store) or 4.9 us (ring mode: two store warps) after it (mok/cuda/ROUNDS.md, "Round 14"). This probe runs
// the push alone: 132 CTAs, each storing 128 x 256 bf16 tiles (64 KB, one down tile) row by row from a staging tile in
// shared memory into rows scattered over a [slots, H] buffer, anchor-2's sizes by default (524,288 slots of H = 4096:
// 4.3 GB, every (slot, column block) written once, 67,584 tiles). No loads from global memory, no lookups (the slot
// of a row is a bijective hash of its index), no hand-offs: only the stores, so the rate is the ceiling for each way
// of issuing them.
//
//   consumers    the two consumer warpgroups (256 threads) as down_epilogue_push does in gather mode: per half tile
//                each thread copies chunk t % 16 of 8 rows, the warpgroup meets at a barrier before and after
//   storewarps2  two warps as the store warps do in ring mode (store_warps.cuh): each warp 64 rows, the row's
//                destination taken by shuffle from the lane that owns it, 2 rows per warp instruction
//   storewarps4  the same with four warps (32 rows each)
//   allwarps     all 12 warps, two rows per warp instruction (what the SM can do when nothing else runs)
//   bulk         one warp issues a 256-byte cp.async.bulk (shared -> global) per row and half tile, 256 per tile,
//                and waits for their reads at the end of each tile; the staging rows are unswizzled here (the
//                kernel's staging is 128B-swizzled, which a bulk copy cannot read: what it would buy)
//
// Build and run (H200):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
//     -o build/push_store_probe experiments/push_store_probe.cu
//   build/push_store_probe [tiles per CTA (512) [runs (7) [H (4096) [CTAs (132)]]]]
// With fewer CTAs than SMs the HBM is no longer the limit: what one SM's issue rate allows (in the megakernel about
// a third of the SMs run down epilogues at any time at anchor-2).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mok/epilogue_staging.cuh"  // the kernel's staging layout (staging_offset)
#include "sm90_probe_util.cuh"

namespace probe {

constexpr int kThreads = 384;      // the megakernel's CTA: producer warpgroup + two consumer warpgroups
constexpr int kTileRows = 128;     // rows per down tile
constexpr int kTileCols = 256;     // bf16 columns per down tile (two halves of 128, staged one at a time)
constexpr int kHalfBytes = 256;    // one row of one half tile: 128 bf16
constexpr int kStagingBytes = kTileRows * kHalfBytes;  // 32 KB, as the kernel's staging tile
enum Mode { kConsumers = 0, kStoreWarps2 = 1, kStoreWarps4 = 2, kAllWarps = 3, kBulk = 4 };
const char* kNames[] = {"consumers", "storewarps2", "storewarps4", "allwarps", "bulk"};
constexpr int kModes = 5;

struct Problem {
  uint8_t* slots;     // [num_slots, hidden] bf16
  int num_slots;      // a power of two
  int hidden;         // a multiple of kTileCols
  int tiles_per_cta;
};

// The slot of row `row` (of all tiles' rows, in order): a bijection of [0, num_slots), so rows land scattered and
// every slot is written once per column block.
__device__ __forceinline__ long long slot_of(long long row, int num_slots) {
  return (row * 0x9E3779B1LL) & (num_slots - 1);
}

// Where row r of tile `tile`, half `half`, starts in global memory.
__device__ __forceinline__ uint8_t* row_destination(const Problem& p, int tile, int r, int half) {
  const int col_blocks = p.hidden / kTileCols;
  const long long row = static_cast<long long>(tile / col_blocks) * kTileRows + r;
  const long long col = static_cast<long long>(tile % col_blocks) * kTileCols + half * (kTileCols / 2);
  return p.slots + (slot_of(row, p.num_slots) * p.hidden + col) * 2;
}

// `warps` warps (warp index w in [0, warps)) copy rows [w * rows_per_warp, +rows_per_warp) of a half tile as the
// store warps do: lane l owns row first + l of each 32-row group, lanes take a row's destination by shuffle.
__device__ __forceinline__ void store_rows_by_warp(const Problem& p, const uint8_t* staging, int tile, int half,
                                                   int w, int rows_per_warp) {
  const int lane = threadIdx.x & 31, chunk = lane & 15;
  for (int first = w * rows_per_warp; first < (w + 1) * rows_per_warp; first += 32) {
    const unsigned long long mine = reinterpret_cast<unsigned long long>(row_destination(p, tile, first + lane, half));
#pragma unroll 4
    for (int it = 0; it < 16; ++it) {
      const int r = 2 * it + (lane >> 4);
      uint8_t* dst = reinterpret_cast<uint8_t*>(__shfl_sync(0xFFFFFFFFu, mine, r));
      const uint4 v = *reinterpret_cast<const uint4*>(
          staging + mok::sm90::staging_offset<mok::sm90::Sm90Tiles>(first + r, chunk));
      *reinterpret_cast<uint4*>(dst + chunk * 16) = v;
    }
  }
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1) push_kernel(Problem p) {
  extern __shared__ uint8_t raw[];
  uint8_t* staging = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 127) & ~uintptr_t(127));
  for (int i = threadIdx.x; i < kStagingBytes / 4; i += blockDim.x) {
    reinterpret_cast<uint32_t*>(staging)[i] = 0x3c003c00u + i;  // finite bf16 pairs, not all equal
  }
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  for (int j = 0; j < p.tiles_per_cta; ++j) {
    const int tile = blockIdx.x + j * gridDim.x;
    for (int half = 0; half < 2; ++half) {
      if constexpr (kMode == kConsumers) {
        if (threadIdx.x < 128) continue;
        const int t128 = threadIdx.x & 127, wg = threadIdx.x / 128 - 1, chunk = t128 & 15;
        const int barrier = 2 + wg;
        asm volatile("barrier.sync %0, 128;" ::"r"(barrier) : "memory");  // the staging is written (stmatrix)
#pragma unroll
        for (int it = 0; it < 8; ++it) {
          const int row = 64 * wg + (t128 >> 4) + 8 * it;
          const uint4 v = *reinterpret_cast<const uint4*>(
              staging + mok::sm90::staging_offset<mok::sm90::Sm90Tiles>(row, chunk));
          *reinterpret_cast<uint4*>(row_destination(p, tile, row, half) + chunk * 16) = v;
        }
        asm volatile("barrier.sync %0, 128;" ::"r"(barrier) : "memory");  // read before the next half is staged
      } else if constexpr (kMode == kStoreWarps2) {
        if (warp == 2 || warp == 3) store_rows_by_warp(p, staging, tile, half, warp - 2, 64);
      } else if constexpr (kMode == kStoreWarps4) {
        if (warp < 4) store_rows_by_warp(p, staging, tile, half, warp, 32);
      } else if constexpr (kMode == kAllWarps) {
        // 12 warps, two rows per warp per step (16 lanes of 16 bytes each per 256-byte row): 24 rows a step.
        const int chunk = lane & 15;
        for (int r = 2 * warp + (lane >> 4); r < kTileRows; r += 24) {
          const uint4 v = *reinterpret_cast<const uint4*>(
              staging + mok::sm90::staging_offset<mok::sm90::Sm90Tiles>(r, chunk));
          *reinterpret_cast<uint4*>(row_destination(p, tile, r, half) + chunk * 16) = v;
        }
      } else {  // kBulk: warp 0, rows unswizzled in the staging tile
        if (warp != 0) continue;
        for (int r = lane; r < kTileRows; r += 32) {
          asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(
                           row_destination(p, tile, r, half)),
                       "r"(mok::sm90::smem_addr(staging + r * kHalfBytes)), "n"(kHalfBytes)
                       : "memory");
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
        if (half == 1) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // the staging is free again
      }
    }
  }
  if constexpr (kMode == kBulk) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

using Kernel = void (*)(Problem);
const Kernel kKernels[] = {push_kernel<kConsumers>, push_kernel<kStoreWarps2>, push_kernel<kStoreWarps4>,
                           push_kernel<kAllWarps>, push_kernel<kBulk>};

}  // namespace probe

int main(int argc, char** argv) {
  using namespace probe;
  const int tiles_per_cta = argc > 1 ? std::atoi(argv[1]) : 512;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 7;
  const int hidden = argc > 3 ? std::atoi(argv[3]) : 4096;
  const int ctas = argc > 4 ? std::atoi(argv[4]) : 132;
  if (tiles_per_cta <= 0 || runs <= 0 || hidden <= 0 || hidden % kTileCols != 0 || ctas <= 0 || ctas > 132) {
    std::fprintf(stderr, "usage: %s [tiles per CTA > 0 [runs > 0 [H, a multiple of %d [CTAs in 1..132]]]]\n", argv[0],
                 kTileCols);
    return 2;
  }
  // Enough slots that every (slot, column block) of every tile is written once: a power of two >= the rows.
  const long long rows = static_cast<long long>(ctas) * tiles_per_cta / (hidden / kTileCols) * kTileRows + kTileRows;
  int num_slots = 1;
  while (num_slots < rows) num_slots *= 2;
  uint8_t* slots;
  const size_t bytes = static_cast<size_t>(num_slots) * hidden * 2;
  PROBE_CHECK(cudaMalloc(&slots, bytes));
  PROBE_CHECK(cudaMemset(slots, 0, bytes));
  const Problem p{slots, num_slots, hidden, tiles_per_cta};
  const int smem = kStagingBytes + 128;
  for (Kernel k : kKernels) PROBE_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  const double tile_bytes = static_cast<double>(kTileRows) * kTileCols * 2;
  const double total = tile_bytes * ctas * tiles_per_cta;
  std::printf("%d CTAs x %d tiles of 128 rows x 256 bf16 (64 KB) into %d slots of H %d (%.2f GB written); median "
              "of %d runs, modes interleaved\n", ctas, tiles_per_cta, num_slots, hidden, total / 1e9, runs);
  const std::vector<double> ms =
      median_ms_rotated(kModes, runs, [&](int mode) { kKernels[mode]<<<ctas, kThreads, smem>>>(p); });
  std::printf("%-14s %10s %10s %14s\n", "mode", "ms", "TB/s", "us per tile/SM");
  for (int m = 0; m < kModes; ++m) {
    std::printf("%-14s %10.3f %10.2f %14.2f\n", kNames[m], ms[m], total / (ms[m] * 1e-3) / 1e12,
                ms[m] * 1e3 / tiles_per_cta);
  }
  PROBE_CHECK(cudaFree(slots));
  return 0;
}
