// How fast can the megakernel's GEMM mainloop go on one H200, and what do its loads cost?
//
// The megakernel's tile is 128 x 256 x 64 per stage (two consumer warpgroups, wgmma m64n256k16 with both operands
// from shared memory, 4 stages). This probe runs that mainloop with nothing else around it (no tasks, no
// dependencies, no epilogue), 132 CTAs, anchor-5's sizes (K = 7168, 16 column blocks of 256 per 128-row tile):
//
//   noload                  the consumers multiply whatever sits in the stages, no loads at all: wgmma's own rate
//   box                     A and B by TMA, one box each (ring mode's loads)
//   cpasync                 A gathered from token rows by the producer warpgroup with cp.async (gather mode's
//                           loads), B by TMA; the consumers fence the generic-proxy writes before wgmma
//   cpasync-nofence         the same without the fence (not a correct ordering in general; timing only)
//   cpasync-contiguous      the same copies from 128 consecutive token rows (the scatter, or the copy path?)
//   mcastB                  2-CTA clusters on one column block: each CTA loads half of B and multicasts it to both,
//                           A its own; consumers release a stage on both CTAs' `empty` with mbarrier.arrive's
//                           default semantics
//   mcastB-release.cluster  the same with `mbarrier.arrive.release.cluster` for the remote release (round 9's
//                           cluster draft did this: 1.8x slower here)
//   box@mcastB-grid         box on the cluster grid's CTA count (fewer when pairs do not fit a GPC)
//   cpasync-pairA           2-CTA clusters on one row set and two column blocks (gather mode's two blocks at I = 256):
//                           each CTA gathers half of the A rows with cp.async (64 threads) and one thread sends that
//                           half to the peer's stage by a bulk shared-to-shared copy, B its own by TMA; so a CTA's
//                           cp.async bytes per FLOP halve (round 37: the copies cost anchor-2's kernel about 13%)
//   cpasync@mcastB-grid     cpasync on the cluster grid's CTA count (what cpasync-pairA is to be read against)
//   pingpong                the consumer warpgroups take turns (CUTLASS's ping-pong, round 21's question): each
//                           128 x 256 tile is two 128 x 128 halves, warpgroup w multiplies half w over all 128 rows
//                           (two m64n128k16 per K step) while the other runs its epilogue; the producer loads A and
//                           the half's 128 B rows per stage (A twice per tile: 1.33x the bytes of box per FLOP)
//   noload-pingpong         the same turns without loads: one warpgroup's m64n128 pairs against noload's two
//                           warpgroups of m64n256
//   pingpong-shared         the megakernel's own form (its ping-pong down task): box's loads (A and all 256 B rows
//                           per stage), both warpgroups reading every stage in turn, so a stage is refilled only
//                           after the second warpgroup's turn; K <= 256 only (a longer K needs more stages than the
//                           ring has in one turn: a deadlock, which the kernel's launch refuses too; skipped in "all")
//   pingpong-early,         pingpong and pingpong-shared, passing the turn right after the last wgmma of the turn is
//   pingpong-shared-early   issued instead of after it completed (CUTLASS's hand-over; the kernel's is the latter,
//                           and round 21's pp_early_handover.patch is the former): no drained tensor pipe per turn
//   box-store               box, and after each tile a real epilogue's memory work: each consumer warpgroup packs its
//                           64 x 256 fp32 accumulators to bf16 pairs, writes them into its 16 KB staging in two halves
//                           and sends each half to global memory by one bulk copy, waiting for the first half's reads
//                           before staging the second (the kernel's down epilogue with down_tma, in bytes and waits)
//   box-store-deferred      the same work moved into the next tile's mainloop (round 40's lead for the gate/up and down
//                           epilogues): the bf16 pairs stay in 64 registers, the next tile's first K block is issued,
//                           and half h is staged and stored right after K block h's wgmma are committed, so the tensor
//                           cores multiply while the warpgroup stores (asynchronous wgmma, as FlashAttention-3 overlaps
//                           its softmax); the stand-in epilogue below is split the same way. The last tile's halves go
//                           out after the loop. What it shows: how much of an epilogue this hides, and whether 64 more
//                           live registers beside the 128 accumulators fit (nvcc -Xptxas -v: spills)
//   box-store-threads,      the same two, with each half sent by the warpgroup's own 16-byte stores from the staging
//   box-store-threads-deferred  instead of a bulk copy: how the kernel writes the saved gate/up rows of a training
//                           forward (store_staged_rows), which the bench's forward runs; such stores hold the warps
//   Round 41 ran the four above: deferred, the stores cost more than after the mainloop (+1.19-1.94 against
//   +0.75-1.25 us per tile at every K), while the stand-in's spin, split the same way, overlapped the wgmma. These
//   modes ask which step of the store path does not overlap with wgmma in flight (serial and deferred as named):
//   box-stage, box-stage-deferred   only the st.shared of each half into the staging (and the warpgroup barrier before
//                           it): no proxy fence, no copy; nothing reaches global memory
//   box-store-deferred-nofence  box-store-deferred without the proxy fence before the bulk copy (not a correct
//                           ordering in general; timing only)
//   box-global, box-global-deferred  no staging: each thread stores its bf16 pairs straight to global memory in the
//                           accumulators' own layout (row 16 w + lane / 4 and + 8, two columns per pair), as an
//                           epilogue without shared memory would
//   And which step of the store path costs the time after the mainloop (serial):
//   box-store-nowait        box-store without waiting for the first half's copy to read the staging before the
//                           second half is staged (the bytes race: timing only)
//   box-store-nofence       box-store without the proxy fences (timing only)
//   box-store-whole         32 KB of staging per warpgroup: the whole tile staged, then one 32 KB bulk copy, so no
//                           wait between halves. Fits beside three stages only (-DPROBE_STAGES=3; 64 KB more than
//                           the kernel's staging); skipped at four
//   What they found (round 41, calls 2-3): the st.shared cost 0-0.4 us and overlap when deferred; neither the wait
//   nor the fence is the serial cost; deferred, the fence waits for the wgmma in flight (0.25-0.7 us); the copy's
//   bytes are what is left; straight from registers costs 5-7 us per tile (a warp store writes 8 rows x 16 bytes).
//
// Epilogue (argv[5], ns per tile, default 0): after each tile every consumer warpgroup spins that long on
// %globaltimer, the tensor cores idle, as an epilogue's arithmetic and stores keep them. The cooperative modes pay it
// after each mainloop; pingpong pays it while the other warpgroup multiplies. At anchor-2 the gate/up epilogue is
// about 4.8 us per 57.5 us task, the down block's about 2.2 us per 4.1 us (mok/cuda/ROUNDS.md, rounds 20-21).
//
// Modes run interleaved (rotated), so they share one power state: experiments/mainloop_gap.py runs them one at a
// time for seconds each with the SM clock sampled, which is where the power limit shows (mok/cuda/ROUNDS.md,
// "Round 13").
//
// Build and run (H200):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
//     -o build/mainloop_roofline_probe experiments/mainloop_roofline_probe.cu
//   build/mainloop_roofline_probe [tiles per CTA [mode|all [runs [K [epilogue ns]]]]]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "mok/epilogue_staging.cuh"  // pack_bf16_pair
#include "mok/gemm_mainloop.cuh"  // the kernel's own wgmma wrapper, SW128 descriptors, mbarrier and TMA helpers
#include "sm90_probe_util.cuh"

namespace probe {

constexpr int kThreads = 384;  // producer warpgroup + two consumer warpgroups
enum Mode {
  kNoLoad = 0,
  kBox = 1,
  kCpAsync = 2,
  kMcastB = 3,
  kBoxClusterGrid = 4,
  kMcastBClusterRelease = 5,
  kCpAsyncNoFence = 6,
  kCpAsyncContiguous = 7,
  kPingPong = 8,
  kNoLoadPingPong = 9,
  kPingPongShared = 10,
  kPingPongEarly = 11,
  kPingPongSharedEarly = 12,
  kCpAsyncPairA = 13,
  kCpAsyncClusterGrid = 14,
  kBoxStore = 15,
  kBoxStoreDeferred = 16,
  kBoxStoreThreads = 17,
  kBoxStoreThreadsDeferred = 18,
  kBoxStage = 19,
  kBoxStageDeferred = 20,
  kBoxStoreDeferredNoFence = 21,
  kBoxGlobal = 22,
  kBoxGlobalDeferred = 23,
  kBoxStoreNoWait = 24,
  kBoxStoreNoFence = 25,
  kBoxStoreWhole = 26,
};
const char* kNames[] = {"noload", "box", "cpasync", "mcastB", "box@mcastB-grid", "mcastB-release.cluster",
                        "cpasync-nofence", "cpasync-contiguous", "pingpong", "noload-pingpong", "pingpong-shared",
                        "pingpong-early", "pingpong-shared-early", "cpasync-pairA", "cpasync@mcastB-grid", "box-store",
                        "box-store-deferred", "box-store-threads", "box-store-threads-deferred", "box-stage",
                        "box-stage-deferred", "box-store-deferred-nofence", "box-global", "box-global-deferred",
                        "box-store-nowait", "box-store-nofence", "box-store-whole"};
constexpr int kModes = 27;
static_assert(sizeof(kNames) / sizeof(kNames[0]) == kModes, "one name per mode");
// Modes that launch on the cluster grid (cluster_ctas CTAs, below).
__host__ __device__ constexpr bool on_cluster_grid(int mode) {
  return mode == kMcastB || mode == kBoxClusterGrid || mode == kMcastBClusterRelease || mode == kCpAsyncPairA ||
         mode == kCpAsyncClusterGrid;
}
// The modes that write an output tile after each mainloop (box-store and round 41's variants: the enum's last ones,
// so a range), those that do it during the next tile's first K blocks, and how a half leaves (stage_and_store_half).
__host__ __device__ constexpr bool is_store_mode(int mode) { return mode >= kBoxStore && mode <= kBoxStoreWhole; }
__host__ __device__ constexpr bool is_deferred_store(int mode) {
  return mode == kBoxStoreDeferred || mode == kBoxStoreThreadsDeferred || mode == kBoxStageDeferred ||
         mode == kBoxStoreDeferredNoFence || mode == kBoxGlobalDeferred;
}
enum class HalfOut { kBulkCopy, kThreadStores, kBulkCopyNoFence, kBulkCopyNoWait, kStageOnly, kGlobalFromRegisters,
                     kWholeTile };
__host__ __device__ constexpr HalfOut half_out(int mode) {
  return (mode == kBoxStoreThreads || mode == kBoxStoreThreadsDeferred) ? HalfOut::kThreadStores
         : (mode == kBoxStoreDeferredNoFence || mode == kBoxStoreNoFence) ? HalfOut::kBulkCopyNoFence
         : mode == kBoxStoreNoWait                                      ? HalfOut::kBulkCopyNoWait
         : mode == kBoxStoreWhole                                       ? HalfOut::kWholeTile
         : (mode == kBoxStage || mode == kBoxStageDeferred)             ? HalfOut::kStageOnly
         : (mode == kBoxGlobal || mode == kBoxGlobalDeferred)           ? HalfOut::kGlobalFromRegisters
                                                                        : HalfOut::kBulkCopy;
}
__host__ __device__ constexpr bool uses_bulk_copy(HalfOut out) {
  return out == HalfOut::kBulkCopy || out == HalfOut::kBulkCopyNoFence || out == HalfOut::kBulkCopyNoWait ||
         out == HalfOut::kWholeTile;
}
// Named barrier 2 + w: warpgroup w's turn begins (1 is the producers').
__host__ __device__ constexpr uint32_t turn_barrier(int wg) { return 2u + static_cast<uint32_t>(wg); }

struct Problem {
  const char* x;       // [tokens, H] bf16 token rows (cpasync's source)
  int tokens;
  int hidden;
  int num_rowsets;
  const int* rowsets;  // [num_rowsets, 128]
  int tasks_per_cta;
  int col_blocks;
  unsigned epilogue_ns;  // per tile and consumer warpgroup: the tensor cores idle this long (0: no epilogue)
  char* y;               // box-store modes: [tiles, CTAs, 2 warpgroups, kTileBytes] of bf16 output, each tile its own
};

// box-store modes: each consumer warpgroup's staging (16 KB: half of its 64 x 256 bf16 tile, kTileBytes), after
// Shared (1024-aligned, as a bulk copy's source need not be but the kernel's staging is).
constexpr int kStagingBytes = 16384;
constexpr int kTileBytes = 2 * kStagingBytes;  // a warpgroup's 64 x 256 bf16 output tile
constexpr size_t kStagingOffset = (sizeof(Shared) + 1023) / 1024 * 1024;
__device__ __forceinline__ uint8_t* staging_of(Shared& s, int wg, bool whole_tile) {
  return reinterpret_cast<uint8_t*>(&s) + kStagingOffset + wg * (whole_tile ? kTileBytes : kStagingBytes);
}
__device__ __forceinline__ void consumer_wg_sync(int wg) { asm volatile("bar.sync %0, 128;" ::"r"(4 + wg) : "memory"); }

// Half `kHalf` of this warpgroup's bf16 tile (`pairs`: 64 bf16 pairs per thread, 128 bytes per thread and half) into
// its staging, then out to `dst` by one 16 KB bulk copy from thread 0 (kOut = kBulkCopy). The staging is reused only
// once the previous copy has read it (thread 0 waits, the warpgroup's barrier passes that on). The 16-byte chunks of
// a thread's 128-byte row are XOR-swizzled by the thread, so that a quarter-warp's stores hit eight different bank
// groups. The other ways out (HalfOut):
//   kThreadStores         the warpgroup copies the staged half out itself, 16 bytes per thread and step (a warp
//                         writes 512 contiguous bytes per step), then meets at its barrier before the staging is reused
//   kBulkCopyNoFence      kBulkCopy without the proxy fence (timing only)
//   kBulkCopyNoWait       kBulkCopy without the wait for the previous copy's reads (timing only)
//   kStageOnly            the barrier and the st.shared, nothing more
//   kWholeTile            half h staged at 16 KB h of a 32 KB staging, never waited for in between; after the second
//                         half, one 32 KB bulk copy (the wait for the previous tile's copy comes before the first)
//   kGlobalFromRegisters  no staging and no barrier: each pair straight to its place in the 64 x 256 tile (512-byte
//                         rows), pairs[2 j + r] at row 16 w + lane / 4 + 8 r, columns 8 j + 2 (lane % 4) (wgmma's
//                         accumulator layout), so a warp's store writes 8 rows x 16 bytes
template <int kHalf, HalfOut kOut>
__device__ __forceinline__ void stage_and_store_half(const uint32_t (&pairs)[64], uint8_t* staging, char* dst, int wg) {
  const int t = threadIdx.x & 127;
  if constexpr (kOut == HalfOut::kGlobalFromRegisters) {
    const int row = 16 * (t / 32) + (t & 31) / 4, column = 2 * (t & 3);
#pragma unroll
    for (int jj = 0; jj < 16; ++jj) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int j = 16 * kHalf + jj;
        *reinterpret_cast<uint32_t*>(dst + (row + 8 * r) * 512 + (8 * j + column) * 2) = pairs[2 * j + r];
      }
    }
    return;
  }
  constexpr bool kWhole = kOut == HalfOut::kWholeTile;
  constexpr bool kBulk = uses_bulk_copy(kOut);
  const bool wait_reads = kWhole ? kHalf == 0 : kBulk && kOut != HalfOut::kBulkCopyNoWait;
  if (wait_reads && t == 0) mok::sm90::bulk_wait_group_read_all();
  if (!kWhole || kHalf == 0) consumer_wg_sync(wg);
  const uint32_t row = smem_addr(staging) + (kWhole ? kHalf * kStagingBytes : 0) + t * 128;
#pragma unroll
  for (int c = 0; c < 8; ++c) {  // st.shared: through a generic pointer the compiler emits generic stores
    const int q = 32 * kHalf + 4 * c;
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(row + 16 * (c ^ (t & 7))), "r"(pairs[q]),
                 "r"(pairs[q + 1]), "r"(pairs[q + 2]), "r"(pairs[q + 3]) : "memory");
  }
  if constexpr (kOut == HalfOut::kThreadStores) {
    consumer_wg_sync(wg);
    const uint32_t base = smem_addr(staging);
#pragma unroll
    for (int step = 0; step < kStagingBytes / (128 * 16); ++step) {
      const uint32_t offset = (step * 128 + t) * 16;
      uint4 v;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(base + offset));
      *reinterpret_cast<uint4*>(dst + kHalf * kStagingBytes + offset) = v;
    }
  } else if constexpr (kWhole) {
    if constexpr (kHalf == 1) {
      mok::sm90::fence_proxy_async_shared();
      consumer_wg_sync(wg);
      if (t == 0) {
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(staging)),
                     "n"(kTileBytes) : "memory");
        mok::sm90::bulk_commit_group();
      }
    }
  } else if constexpr (kBulk) {
    // the generic-proxy writes, read next by the bulk copy (async proxy)
    if constexpr (kOut != HalfOut::kBulkCopyNoFence) mok::sm90::fence_proxy_async_shared();
    consumer_wg_sync(wg);
    if (t == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + kHalf * kStagingBytes),
                   "r"(smem_addr(staging)), "n"(kStagingBytes) : "memory");
      mok::sm90::bulk_commit_group();
    }
  }
}

// The accumulators as bf16 pairs (one F2FP per pair, as the kernel's epilogues pack them).
__device__ __forceinline__ void pack_accumulators(const float (&acc)[128], uint32_t (&pairs)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) pairs[i] = mok::sm90::pack_bf16_pair(acc[2 * i], acc[2 * i + 1]);
}

// A stand-in epilogue: `ns` nanoseconds in which this warpgroup issues no wgmma.
__device__ __forceinline__ void idle_epilogue(unsigned ns) {
  if (ns == 0) return;
  const uint64_t start = mok::sm90::globaltimer_ns();
  while (mok::sm90::globaltimer_ns() - start < ns) {
  }
}

__device__ __forceinline__ void turn_wait(uint32_t id) { asm volatile("bar.sync %0, 256;" ::"r"(id) : "memory"); }
__device__ __forceinline__ void turn_pass(uint32_t id) { asm volatile("bar.arrive %0, 256;" ::"r"(id) : "memory"); }

// Ping-pong consumer (pingpong, noload-pingpong, pingpong-shared): warpgroup `wg` multiplies half `wg` of every
// tile: all 128 rows of A against the half's 128 B rows, two m64n128k16 per K step (acc[0..63] rows 0-63,
// acc[64..127] rows 64-127, the kernel's consume_column_half). kShared: both warpgroups read every stage (B rows
// 128 * wg on in it), as the kernel does. Otherwise the producer queues the halves in order (tile j half 0, tile j
// half 1, ...), and each warpgroup steps over the other's K blocks in the stage ring. kEarlyPass: the turn passes
// right after the turn's last wgmma are issued, not once they completed. The turns: warpgroup 0 waits until warpgroup 1
// has finished the previous tile's mainloop, warpgroup 1 until warpgroup 0 has finished this tile's; each passes the
// turn once its last wgmma completed (as the megakernel's ping_pong_mainloop does; unless kEarlyPass), then runs its
// epilogue while the other multiplies.
template <bool kLoads, bool kShared, bool kEarlyPass>
__device__ void ping_pong_consumer(const Problem& p, Shared& s, int wg, int kblocks, float* sink) {
  const int lane = threadIdx.x & 31;
  uint32_t stage = 0, phase = 0;
  auto advance = [&] {
    if (++stage == kStages) { stage = 0; phase ^= 1u; }
  };
  float keep = 0.0f;
  float acc[128];
  for (int j = 0; j < p.tasks_per_cta; ++j) {
    // Warpgroup 1's last turn hands over nothing: no tile follows.
    const bool hands_over = wg == 0 || j + 1 < p.tasks_per_cta;
    if (!kShared && wg == 1) for (int kb = 0; kb < kblocks; ++kb) advance();  // half 0's K blocks are warpgroup 0's
    if (wg == 1 || j > 0) turn_wait(turn_barrier(wg));
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
    mok::sm90::fence_accumulators(acc);
    uint32_t prev = 0;
    for (int kb = 0; kb < kblocks; ++kb) {
      if constexpr (kLoads) mbar_wait_spin(&s.full[stage], phase);
      __syncwarp();
      const uint64_t da = mok::sm90::make_sw128_kmajor_desc(smem_addr(s.a[stage]));  // rows 0..63; 8 KB on: 64..127
      // The half's 128 B rows: the stage's start, or (kShared) row 128 * wg of its 256 (16 KB on, 1024-aligned).
      const uint64_t db = mok::sm90::make_sw128_kmajor_desc(smem_addr(s.b[stage]) + (kShared ? wg * 128 * 128 : 0));
      mok::sm90::wgmma_fence();
#pragma unroll
      for (int k = 0; k < kBlockK / 16; ++k) {
        mok::sm90::wgmma_m64n128k16_bf16<0>(acc, mok::sm90::desc_advance_bytes(da, k * 32),
                                            mok::sm90::desc_advance_bytes(db, k * 32));
        mok::sm90::wgmma_m64n128k16_bf16<64>(acc, mok::sm90::desc_advance_bytes(da, 64 * 128 + k * 32),
                                             mok::sm90::desc_advance_bytes(db, k * 32));
      }
      mok::sm90::wgmma_commit();
      if (kEarlyPass && hands_over && kb + 1 == kblocks) turn_pass(turn_barrier(1 - wg));
      mok::sm90::wgmma_wait<1>();
      mok::sm90::fence_accumulators(acc);
      if (kLoads && kb > 0 && lane == 0) mbar_arrive(&s.empty[prev]);
      __syncwarp();
      prev = stage;
      advance();
    }
    mok::sm90::wgmma_wait<0>();
    mok::sm90::fence_accumulators(acc);
    if (kLoads && lane == 0) mbar_arrive(&s.empty[prev]);
    __syncwarp();
    if (!kEarlyPass && hands_over) turn_pass(turn_barrier(1 - wg));
    if (!kShared && wg == 0) for (int kb = 0; kb < kblocks; ++kb) advance();  // half 1's K blocks are warpgroup 1's
    idle_epilogue(p.epilogue_ns);
    keep += acc[0] + acc[127];  // constant indices: a run-time index would put acc in local memory
  }
  if (keep == 1234.5f) sink[0] = keep;
}

template <int kMode, int kClusterSize, bool kClusterRelease = false>
__device__ void mainloop(const Problem& p, const CUtensorMap& ring_map, const CUtensorMap& w_map,
                         const CUtensorMap& w_half_map, float* sink) {
  // cpasync-nofence: the same copies without the consumers' proxy fence (wrong ordering in general; timing only).
  // cpasync-contiguous: the copies of cpasync from 128 consecutive token rows (is it the scatter or the copy path?).
  constexpr bool kPairA = kMode == kCpAsyncPairA;
  constexpr bool kGathers = kMode == kCpAsync || kMode == kCpAsyncNoFence || kMode == kCpAsyncContiguous || kPairA;
  constexpr bool kSharedStages = kMode == kPingPongShared || kMode == kPingPongSharedEarly;
  constexpr bool kPingPongMode = kMode == kPingPong || kMode == kNoLoadPingPong || kMode == kPingPongEarly;  // own stages
  constexpr bool kTurns = kPingPongMode || kSharedStages;  // the warpgroups take turns
  constexpr bool kNoLoads = kMode == kNoLoad || kMode == kNoLoadPingPong;
  extern __shared__ uint8_t raw[];
  Shared& s = *reinterpret_cast<Shared*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const int tid = threadIdx.x;
  const uint32_t crank = kClusterSize > 1 ? cluster_rank() : 0;
  if (tid == 0) {
    for (int i = 0; i < kStages; ++i) {
      // pairA: the sender's expect_tx arrival and its own half's; the peer's half comes as transaction bytes.
      mbar_init(&s.full[i], kPairA ? 2 : kGathers ? 1 + 128 : 1);
      mbar_init(&s.half_full[i], 64);
      // One arrival per consumer warp of every CTA the stage feeds (pingpong: one warpgroup reads each stage).
      mbar_init(&s.empty[i], (kPingPongMode ? 4 : 8) * kClusterSize);
    }
    mok::sm90::fence_mbarrier_init();
  }
  if constexpr (kClusterSize > 1) cluster_sync(); else __syncthreads();
  const int kblocks = p.hidden / kBlockK;
  uint32_t stage = 0, phase = 0;
  auto advance = [&] {
    if (++stage == kStages) { stage = 0; phase ^= 1u; }
  };
  // box-store modes: the kernel's register split (mok::sm90::RegisterSplit: 56 producer, 224 consumer registers),
  // which the 64 registers of deferred bf16 pairs beside the 128 accumulators need (at the launch's 168 they spill).
  constexpr bool kStoreModes = is_store_mode(kMode);
  using Split = mok::sm90::RegisterSplit<false>;
  if (tid < 128) {
    if constexpr (kStoreModes) mok::sm90::setmaxnreg_dec<Split::kProducer>();
    if (kNoLoads || (!kGathers && tid != 0)) {
      // nothing to load, or not the TMA thread
    } else {
      for (int j = 0; j < p.tasks_per_cta; ++j) {
        // A cluster's two CTAs run the same column block (they share B) on neighbouring row sets; with pairA the
        // same row set (they share A) on neighbouring column blocks.
        const int task = (kClusterSize > 1) ? (blockIdx.x / 2) + j * (gridDim.x / 2) : blockIdx.x + j * gridDim.x;
        const int rowset = kPairA ? (task / (p.col_blocks / 2)) % p.num_rowsets
                                  : ((task / p.col_blocks) * kClusterSize + static_cast<int>(crank)) % p.num_rowsets;
        const int b_row = kPairA ? ((task % (p.col_blocks / 2)) * 2 + static_cast<int>(crank)) * kBRows
                                 : (task % p.col_blocks) * kBRows;
        if constexpr (kGathers) {
          asm volatile("bar.sync 1, 128;" ::: "memory");
          s.rows[tid] = kMode == kCpAsyncContiguous ? (rowset * kRows + tid) % p.tokens : p.rowsets[rowset * kRows + tid];
          asm volatile("bar.sync 1, 128;" ::: "memory");
        }
        // Ping-pong: the tile's two halves one after the other (2 x kblocks loads); the other modes: one pass.
        const int loads = kPingPongMode ? 2 * kblocks : kblocks;
        for (int i = 0; i < loads; ++i) {
          const int kb = i % kblocks, half = i / kblocks;
          const int k0 = kb * kBlockK;
          if constexpr (kPairA) {
            // Threads 0-63 copy this CTA's half of the rows; thread 64 loads B and, once the half has landed, sends
            // it to the same offset of the peer's stage. A stage's `empty` counts both CTAs' consumer warps, so the
            // peer's stage is free too.
            if (tid < 64) {
              mbar_wait_spin(&s.empty[stage], phase ^ 1u);
              probe::gather_half_kblock(smem_addr(s.a[stage]), p.x, p.hidden, s.rows, kb, tid, 64 * crank);
              cp_async_mbar_arrive_noinc(&s.half_full[stage]);
            } else if (tid == 64) {
              mbar_wait_spin(&s.empty[stage], phase ^ 1u);
              mbar_arrive_expect_tx(&s.full[stage], kBBytes + kABytes / 2);
              tma_load_2d(s.b[stage], &w_map, &s.full[stage], k0, b_row);
              mbar_wait_spin(&s.half_full[stage], phase);
              fence_proxy_async_shared();  // the copies' generic-proxy writes, read next by the bulk copy
              probe::bulk_copy_to_peer(smem_addr(s.a[stage]) + crank * (kABytes / 2), kABytes / 2, &s.full[stage],
                                       crank ^ 1u);
              mbar_arrive(&s.full[stage]);  // this CTA's own half is in
            }
            advance();
            continue;
          }
          mbar_wait_spin(&s.empty[stage], phase ^ 1u);
          if constexpr (kGathers) {
            if (tid == 0) {
              mbar_arrive_expect_tx(&s.full[stage], kBBytes);
              tma_load_2d(s.b[stage], &w_map, &s.full[stage], k0, b_row);
            }
            probe::gather_kblock(smem_addr(s.a[stage]), p.x, p.hidden, s.rows, kb, tid);
            cp_async_mbar_arrive_noinc(&s.full[stage]);
          } else if constexpr (kPingPongMode) {
            // Both halves of the tile in turn, K block by K block: A again, and the half's 128 B rows.
            mbar_arrive_expect_tx(&s.full[stage], kABytes + kBBytes / 2);
            tma_load_2d(s.a[stage], &ring_map, &s.full[stage], k0, rowset * kRows);
            tma_load_2d(s.b[stage], &w_half_map, &s.full[stage], k0, b_row + half * (kBRows / 2));
          } else {
            mbar_arrive_expect_tx(&s.full[stage], kABytes + kBBytes);
            tma_load_2d(s.a[stage], &ring_map, &s.full[stage], k0, rowset * kRows);
            if constexpr (kMode == kMcastB) {
              // This CTA's half of B, into the same offset of both CTAs' stage; each full barrier counts both halves.
              tma_load_2d_multicast(s.b[stage] + crank * (kBBytes / 2), &w_half_map, &s.full[stage], k0,
                               b_row + static_cast<int>(crank) * (kBRows / 2), 0x3);
            } else {
              tma_load_2d(s.b[stage], &w_map, &s.full[stage], k0, b_row);
            }
          }
          advance();
        }
      }
    }
  } else if constexpr (kTurns) {
    ping_pong_consumer<!kNoLoads, kSharedStages, kMode == kPingPongEarly || kMode == kPingPongSharedEarly>(
        p, s, tid / 128 - 1, kblocks, sink);
  } else {
    if constexpr (kStoreModes) mok::sm90::setmaxnreg_inc<Split::kConsumer>();
    const int wg = tid / 128 - 1, lane = tid & 31;
    constexpr bool kDeferred = is_deferred_store(kMode);
    constexpr HalfOut kOut = half_out(kMode);
    uint8_t* staging = kStoreModes ? staging_of(s, wg, kOut == HalfOut::kWholeTile) : nullptr;
    // Tile j's output of this warpgroup in y (each tile its own, so the bytes leave the L2 as the kernel's do).
    auto tile_dst = [&](int j) {
      return p.y + ((static_cast<size_t>(j) * gridDim.x + blockIdx.x) * 2 + wg) * kTileBytes;
    };
    float keep = 0.0f;
    float acc[128];
    uint32_t held[64];  // box-store-deferred: the previous tile's bf16 pairs, stored during this tile's first K blocks
    for (int j = 0; j < p.tasks_per_cta; ++j) {
#pragma unroll
      for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
      mok::sm90::fence_accumulators(acc);
      uint32_t prev = 0;
      for (int kb = 0; kb < kblocks; ++kb) {
        if constexpr (kMode != kNoLoad) mbar_wait_spin(&s.full[stage], phase);
        if constexpr (kGathers && kMode != kCpAsyncNoFence) fence_proxy_async_shared();
        __syncwarp();
        const uint64_t da = mok::sm90::make_sw128_kmajor_desc(smem_addr(s.a[stage]) + wg * 64 * 128);
        const uint64_t db = mok::sm90::make_sw128_kmajor_desc(smem_addr(s.b[stage]));
        mok::sm90::wgmma_fence();
#pragma unroll
        for (int k = 0; k < kBlockK / 16; ++k)
          mok::sm90::wgmma_m64n256k16_bf16(acc, mok::sm90::desc_advance_bytes(da, k * 32),
                                           mok::sm90::desc_advance_bytes(db, k * 32), 1);
        mok::sm90::wgmma_commit();
        if constexpr (kDeferred) {  // the previous tile's halves while K blocks 0 and 1 multiply (K >= 128)
          if (j > 0 && kb == 0) stage_and_store_half<0, kOut>(held, staging, tile_dst(j - 1), wg);
          if (j > 0 && kb == 1) stage_and_store_half<1, kOut>(held, staging, tile_dst(j - 1), wg);
          if (j > 0 && kb < 2) idle_epilogue(p.epilogue_ns / 2);
        }
        mok::sm90::wgmma_wait<1>();
        mok::sm90::fence_accumulators(acc);
        if (kMode != kNoLoad && kb > 0 && lane == 0) {
          for (uint32_t c = 0; c < kClusterSize; ++c) {
            if (kClusterSize > 1) mbar_arrive_cluster<kClusterRelease>(&s.empty[prev], c); else mbar_arrive(&s.empty[prev]);
          }
        }
        __syncwarp();
        prev = stage;
        advance();
      }
      mok::sm90::wgmma_wait<0>();
      mok::sm90::fence_accumulators(acc);
      if (kMode != kNoLoad && lane == 0) {
        for (uint32_t c = 0; c < kClusterSize; ++c) {
          if (kClusterSize > 1) mbar_arrive_cluster<kClusterRelease>(&s.empty[prev], c); else mbar_arrive(&s.empty[prev]);
        }
      }
      __syncwarp();
      if constexpr (kDeferred) {
        pack_accumulators(acc, held);  // stored during the next tile's mainloop, or after the loop
      } else if constexpr (kStoreModes) {
        pack_accumulators(acc, held);
        stage_and_store_half<0, kOut>(held, staging, tile_dst(j), wg);
        stage_and_store_half<1, kOut>(held, staging, tile_dst(j), wg);
        idle_epilogue(p.epilogue_ns);
      } else {
        idle_epilogue(p.epilogue_ns);
      }
      keep += acc[0] + acc[127];  // constant indices: a run-time index would put acc in local memory
    }
    if constexpr (kDeferred) {  // the last tile's halves: nothing left to overlap them with
      if (p.tasks_per_cta > 0) {
        stage_and_store_half<0, kOut>(held, staging, tile_dst(p.tasks_per_cta - 1), wg);
        stage_and_store_half<1, kOut>(held, staging, tile_dst(p.tasks_per_cta - 1), wg);
        idle_epilogue(p.epilogue_ns);
      }
    }
    if constexpr (kStoreModes && uses_bulk_copy(kOut)) {
      if ((tid & 127) == 0) mok::sm90::bulk_wait_group_all();  // the copies' writes are done before the CTA exits
    }
    if (keep == 1234.5f) sink[0] = keep;
  }
  if constexpr (kClusterSize > 1) cluster_sync();  // no CTA leaves while its peer may still write into it
}

template <int kMode>
__global__ void __launch_bounds__(kThreads, 1)
    single_kernel(Problem p, const __grid_constant__ CUtensorMap ring_map, const __grid_constant__ CUtensorMap w_map,
                  const __grid_constant__ CUtensorMap w_half_map, float* sink) {
  mainloop<kMode, 1>(p, ring_map, w_map, w_half_map, sink);
}

template <int kMode, bool kClusterRelease>
__global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(kThreads, 1)
    cluster_kernel(Problem p, const __grid_constant__ CUtensorMap ring_map, const __grid_constant__ CUtensorMap w_map,
                   const __grid_constant__ CUtensorMap w_half_map, float* sink) {
  mainloop<kMode, 2, kClusterRelease>(p, ring_map, w_map, w_half_map, sink);
}

// The store modes' kernels (is_store_mode) by mode number at run time: with `launch` false, allow the one of `mode`
// its shared memory (the staging after the stages); with `launch` true, launch it.
template <int kMode = kBoxStore>
void store_mode_kernel(int mode, bool launch, int ctas, size_t smem, const Problem& p, const CUtensorMap& ring_map,
                       const CUtensorMap& w_map, const CUtensorMap& w_half_map, float* sink) {
  if constexpr (is_store_mode(kMode)) {
    if (mode != kMode) {
      store_mode_kernel<kMode + 1>(mode, launch, ctas, smem, p, ring_map, w_map, w_half_map, sink);
    } else if (launch) {
      single_kernel<kMode><<<ctas, kThreads, smem>>>(p, ring_map, w_map, w_half_map, sink);
    } else {
      PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
  }
}

}  // namespace probe

int main(int argc, char** argv) {
  using namespace probe;
  // argv[1]: tiles per CTA (16: about 1 ms per run, at the top clock; 160: long enough to reach the power limit);
  // argv[2]: one mode only (its name, or "all"), argv[3]: its runs (experiments/mainloop_gap.py samples the clock
  // meanwhile); argv[4]: K (default 7168, anchor-5's gate/up; 256 is anchor-2's down GEMM, 4 K blocks per tile);
  // argv[5]: the stand-in epilogue, ns per tile (default 0).
  const int hidden = argc > 4 ? std::atoi(argv[4]) : 7168;
  const int epilogue_ns = argc > 5 ? std::atoi(argv[5]) : 0;
  if (epilogue_ns < 0) {
    std::fprintf(stderr, "the epilogue must be >= 0 ns, got %d\n", epilogue_ns);
    return 2;
  }
  const int tokens = 8192, col_blocks = 16, num_rowsets = 512;
  if (hidden <= 0 || hidden % kBlockK != 0) {
    std::fprintf(stderr, "K must be a positive multiple of %d, got %d\n", kBlockK, hidden);
    return 2;
  }
  const int ctas = 132, tasks_per_cta = argc > 1 ? std::atoi(argv[1]) : 16;
  int only = -1;
  for (int m = 0; argc > 2 && m < kModes; ++m)
    if (std::strcmp(argv[2], kNames[m]) == 0) only = m;
  if (argc > 2 && only < 0 && std::strcmp(argv[2], "all") != 0) {
    std::fprintf(stderr, "unknown mode %s\n", argv[2]);
    return 2;
  }
  const int iters = argc > 3 ? std::atoi(argv[3]) : 7;
  // pingpong-shared: a warpgroup's turn must fit the stage ring (see the mode list above).
  const bool shared_fits = hidden / kBlockK <= kStages;
  // box-store-deferred stores the previous tile's two halves during K blocks 0 and 1: two K blocks at least.
  const bool deferred_fits = hidden / kBlockK >= 2;
  if (only >= 0 && is_deferred_store(only) && !deferred_fits) {
    std::fprintf(stderr, "%s needs K >= %d, got %d\n", kNames[only], 2 * kBlockK, hidden);
    return 2;
  }
  if ((only == kPingPongShared || only == kPingPongSharedEarly) && !shared_fits) {
    std::fprintf(stderr, "%s needs K <= %d (the stage ring), got %d\n", kNames[only], kStages * kBlockK, hidden);
    return 2;
  }
  const std::vector<int> rowsets = random_tile_rows(tokens, num_rowsets, 7);
  std::mt19937 rng(7);
  // Small values, so the fp32 sums stay finite whatever the bits are.
  std::vector<uint16_t> fill_x((size_t)tokens * hidden), fill_w((size_t)col_blocks * kBRows * hidden);
  for (auto& v : fill_x) v = 0x3c00 + (rng() & 0xff);  // bf16 in [2^-7, 2^-6)
  for (auto& v : fill_w) v = 0x3c00 + (rng() & 0xff);
  char *x, *ring, *w;
  int* d_rowsets;
  float* sink;
  const size_t ring_bytes = (size_t)num_rowsets * kRows * hidden * 2;
  PROBE_CHECK(cudaMalloc(&x, fill_x.size() * 2));
  PROBE_CHECK(cudaMemcpy(x, fill_x.data(), fill_x.size() * 2, cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMalloc(&ring, ring_bytes));
  PROBE_CHECK(cudaMemset(ring, 0x3c, ring_bytes));
  PROBE_CHECK(cudaMalloc(&w, fill_w.size() * 2));
  PROBE_CHECK(cudaMemcpy(w, fill_w.data(), fill_w.size() * 2, cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMalloc(&d_rowsets, rowsets.size() * 4));
  PROBE_CHECK(cudaMemcpy(d_rowsets, rowsets.data(), rowsets.size() * 4, cudaMemcpyHostToDevice));
  PROBE_CHECK(cudaMalloc(&sink, 4));
  char* y = nullptr;  // box-store modes: each tile's output per CTA (two warpgroups' kTileBytes)
  PROBE_CHECK(cudaMalloc(&y, (size_t)ctas * tasks_per_cta * 2 * kTileBytes));
  const CUtensorMap ring_map = encode_bf16_2d(ring, (uint64_t)num_rowsets * kRows, hidden, kRows);
  const CUtensorMap w_map = encode_bf16_2d(w, (uint64_t)col_blocks * kBRows, hidden, kBRows);
  const CUtensorMap w_half_map = encode_bf16_2d(w, (uint64_t)col_blocks * kBRows, hidden, kBRows / 2);
  const size_t smem_bytes = sizeof(Shared) + 1024;
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kNoLoad>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kBox>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kCpAsync>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kCpAsyncContiguous>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kCpAsyncNoFence>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kPingPong>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kNoLoadPingPong>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kPingPongShared>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kPingPongEarly>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(single_kernel<kPingPongSharedEarly>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(cluster_kernel<kMcastB, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(cluster_kernel<kMcastB, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem_bytes));
  PROBE_CHECK(cudaFuncSetAttribute(cluster_kernel<kCpAsyncPairA, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem_bytes));
  // box-store modes: two warpgroups' staging after the stages (227 KB in all; the kernel's own split).
  const size_t store_smem_bytes = kStagingOffset + 2 * kStagingBytes + 1024;
  // box-store-whole: 32 KB per warpgroup, which only three stages leave room for (the opt-in limit: 227 KB).
  const size_t whole_smem_bytes = kStagingOffset + 2 * kTileBytes + 1024;
  const bool whole_fits = whole_smem_bytes <= 227 * 1024;
  auto smem_of = [&](int mode) { return mode == kBoxStoreWhole ? whole_smem_bytes : store_smem_bytes; };
  if (only == kBoxStoreWhole && !whole_fits) {
    std::fprintf(stderr, "box-store-whole needs %zu bytes of shared memory: build with -DPROBE_STAGES=3\n",
                 whole_smem_bytes);
    return 2;
  }
  for (int m = kBoxStore; is_store_mode(m); ++m) {
    if (m != kBoxStoreWhole || whole_fits) {
      store_mode_kernel(m, false, ctas, smem_of(m), Problem{}, ring_map, w_map, w_half_map, sink);
    }
  }
  const Problem p{x, tokens, hidden, num_rowsets, d_rowsets, tasks_per_cta, col_blocks,
                  static_cast<unsigned>(epilogue_ns), y};
  // Pairs of SMs must sit in one GPC: fewer than 66 clusters of two may fit at once, and a cluster that does not
  // fit would run in a second wave. The cluster grid is what fits; box@mcastB-grid is box on as many CTAs.
  cudaLaunchConfig_t occ{};
  occ.gridDim = dim3(ctas);
  occ.blockDim = dim3(kThreads);
  occ.dynamicSmemBytes = smem_bytes;
  int max_clusters = 0;
  PROBE_CHECK(cudaOccupancyMaxActiveClusters(&max_clusters, cluster_kernel<kMcastB, false>, &occ));
  const int cluster_ctas = std::min(ctas, 2 * max_clusters);
  std::printf("clusters of 2 resident at once: %d (cluster grid %d CTAs)\n", max_clusters, cluster_ctas);
  const double flops = 2.0 * ctas * tasks_per_cta * (double)kRows * kBRows * hidden;
  std::printf("132 CTAs x %d tiles of 128 x 256 x %d, %d stages, epilogue %d ns per tile; median of %d runs, modes "
              "interleaved\n", tasks_per_cta, hidden, kStages, epilogue_ns, iters);
  const std::vector<double> ms = median_ms_rotated(kModes, iters, [&](int mode) {
    switch (mode) {
      case kNoLoad: single_kernel<kNoLoad><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink); break;
      case kBox: single_kernel<kBox><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink); break;
      case kCpAsync: single_kernel<kCpAsync><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink); break;
      case kCpAsyncContiguous:
        single_kernel<kCpAsyncContiguous><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kCpAsyncNoFence:
        single_kernel<kCpAsyncNoFence><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kMcastB:
        cluster_kernel<kMcastB, false><<<cluster_ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kMcastBClusterRelease:
        cluster_kernel<kMcastB, true><<<cluster_ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kCpAsyncPairA:
        cluster_kernel<kCpAsyncPairA, false><<<cluster_ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map,
                                                                                     sink);
        break;
      case kCpAsyncClusterGrid:
        single_kernel<kCpAsync><<<cluster_ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kPingPong: single_kernel<kPingPong><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink); break;
      case kNoLoadPingPong:
        single_kernel<kNoLoadPingPong><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kPingPongShared:
        if (shared_fits) single_kernel<kPingPongShared><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kPingPongEarly:
        single_kernel<kPingPongEarly><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        break;
      case kPingPongSharedEarly:
        if (shared_fits) {
          single_kernel<kPingPongSharedEarly><<<ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink);
        }
        break;
      case kBoxStore: case kBoxStoreDeferred: case kBoxStoreThreads: case kBoxStoreThreadsDeferred:
      case kBoxStage: case kBoxStageDeferred: case kBoxStoreDeferredNoFence: case kBoxGlobal: case kBoxGlobalDeferred:
      case kBoxStoreNoWait: case kBoxStoreNoFence: case kBoxStoreWhole:
        if ((deferred_fits || !is_deferred_store(mode)) && (mode != kBoxStoreWhole || whole_fits)) {
          store_mode_kernel(mode, true, ctas, smem_of(mode), p, ring_map, w_map, w_half_map, sink);
        }
        break;
      default: single_kernel<kBox><<<cluster_ctas, kThreads, smem_bytes>>>(p, ring_map, w_map, w_half_map, sink); break;
    }
  }, only);
  std::printf("%-24s %6s %10s %10s %12s\n", "mode", "CTAs", "ms", "TFLOP/s", "TFLOP/s/SM");
  for (int m = 0; m < kModes; ++m) {
    // Not run: K past the ring.
    if (std::isnan(ms[m]) || ((m == kPingPongShared || m == kPingPongSharedEarly) && !shared_fits) ||
        (is_deferred_store(m) && !deferred_fits) || (m == kBoxStoreWhole && !whole_fits)) {
      continue;
    }
    const int grid = on_cluster_grid(m) ? cluster_ctas : ctas;
    const double med = ms[m];
    const double tflops = flops * grid / ctas / (med * 1e-3) / 1e12;
    std::printf("%-24s %6d %10.3f %10.1f %12.2f\n", kNames[m], grid, med, tflops, tflops / grid);
  }
  return 0;
}
