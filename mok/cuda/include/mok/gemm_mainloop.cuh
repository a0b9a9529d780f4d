// The GEMM mainloop: TMA producer and wgmma consumers around a shared-memory stage ring.
//
// One tile is 128 rows x 256 accumulator columns x K, in K blocks of 64. Per stage the producer thread
// lands an A box (128 rows x 64, 16 KB; in gather mode the producer warpgroup copies the rows, see GatherRows)
// and a B tile (256 rows x 64, 32 KB: one 256-row box for the down GEMM, or a 128-row gate box and a 128-row
// up box for the gate/up GEMM) on the stage's `full` mbarrier; each consumer warpgroup multiplies its 64 rows of A with all of B (wgmma m64n256k16, both
// operands K-major from shared memory, fp32 accumulators in 128 registers per thread), then arrives on the
// stage's `empty` mbarrier (one arrival per consumer warp). The K order is fixed (k-block ascending, four
// k16 steps each), so a row's result never depends on anything but that row: the determinism contract.
//
// Accumulator layout of wgmma m64nNk16 (fp32), thread t of the warpgroup (warp w = t/32, lane l):
//   d[4*j + 2*i + c]  holds  row 16*w + l/4 + 8*i,  column 8*j + 2*(l%4) + c    (j < N/8, i, c in {0,1})
#pragma once

#include <cstdint>

#include "sync.cuh"
#include "tma.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

// ---------------------------------------------------------------------------------------------------------
// wgmma primitives (sm_90a)
// ---------------------------------------------------------------------------------------------------------

// Shared-memory matrix descriptor of a K-major operand tile in the 128-byte swizzle layout that TMA writes:
// rows of 128 bytes, 8-row atoms of 1024 bytes. Bits: [0,14) start address >> 4, [16,30) leading byte
// offset >> 4 (unused for swizzled K-major; 1 by convention), [32,46) stride byte offset >> 4 (1024 B
// between 8-row groups), [62,64) layout type (1 = 128B swizzle). The base offset field stays 0 because
// every tile starts on a 1024-byte boundary.
__host__ __device__ __forceinline__ uint64_t make_sw128_kmajor_desc(uint32_t smem_byte_address) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_byte_address >> 4) & 0x3FFFu);
  desc |= static_cast<uint64_t>(1u) << 16;
  desc |= static_cast<uint64_t>(1024u >> 4) << 32;
  desc |= static_cast<uint64_t>(1u) << 62;
  return desc;
}

// Moving along K inside the 128-byte swizzle row: each k16 step is 32 bytes further. The hardware applies
// the swizzle to the final address, so advancing the start address is exact as long as the tile base is
// 1024-byte aligned.
__device__ __forceinline__ uint64_t desc_advance_bytes(uint64_t desc, uint32_t bytes) {
  return desc + static_cast<uint64_t>(bytes >> 4);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }

template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accumulator reads or writes across the asynchronous wgmma boundary.
template <int kN>
__device__ __forceinline__ void fence_accumulators(float (&d)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64 x 256] += A[64 x 16] * B[256 x 16]^T, bf16 in, fp32 accumulate; scale_d = 0 would ignore D.
__device__ __forceinline__ void wgmma_m64n256k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b,
                                                      int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39,"
      "%40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55,"
      "%56, %57, %58, %59, %60, %61, %62, %63,"
      "%64, %65, %66, %67, %68, %69, %70, %71,"
      "%72, %73, %74, %75, %76, %77, %78, %79,"
      "%80, %81, %82, %83, %84, %85, %86, %87,"
      "%88, %89, %90, %91, %92, %93, %94, %95,"
      "%96, %97, %98, %99, %100, %101, %102, %103,"
      "%104, %105, %106, %107, %108, %109, %110, %111,"
      "%112, %113, %114, %115, %116, %117, %118, %119,"
      "%120, %121, %122, %123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, 0;\n"
      "}\n"
      :
        "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]),
        "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
        "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),
        "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),
        "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]),
        "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
        "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]),
        "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]),
        "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]),
        "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]),
        "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
        "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]),
        "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// ---------------------------------------------------------------------------------------------------------
// Pipeline position: stage index and mbarrier phase parity, advanced identically by every thread of a role
// and carried across tasks (the stage ring never drains between tiles).
// ---------------------------------------------------------------------------------------------------------
template <class Tiles>
struct PipeState {
  uint32_t stage = 0;
  uint32_t phase = 0;
  __device__ __forceinline__ void advance() {
    if (++stage == Tiles::kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

// D[64 x 128] += A[64 x 16] * B[128 x 16]^T into d[kFirst .. kFirst + 63] (m64n128's fragment layout, which is the
// order of the first 128 columns of m64n256's). The ping-pong down task issues two per k16 step, one per 64 rows.
template <int kFirst>
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  static_assert(kFirst == 0 || kFirst == 64, "two 64-register halves of the accumulator");
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7,"
      "%8, %9, %10, %11, %12, %13, %14, %15,"
      "%16, %17, %18, %19, %20, %21, %22, %23,"
      "%24, %25, %26, %27, %28, %29, %30, %31,"
      "%32, %33, %34, %35, %36, %37, %38, %39,"
      "%40, %41, %42, %43, %44, %45, %46, %47,"
      "%48, %49, %50, %51, %52, %53, %54, %55,"
      "%56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p, 1, 1, 0, 0;\n"
      "}\n"
      :
        "+f"(d[kFirst + 0]), "+f"(d[kFirst + 1]), "+f"(d[kFirst + 2]), "+f"(d[kFirst + 3]),
        "+f"(d[kFirst + 4]), "+f"(d[kFirst + 5]), "+f"(d[kFirst + 6]), "+f"(d[kFirst + 7]),
        "+f"(d[kFirst + 8]), "+f"(d[kFirst + 9]), "+f"(d[kFirst + 10]), "+f"(d[kFirst + 11]),
        "+f"(d[kFirst + 12]), "+f"(d[kFirst + 13]), "+f"(d[kFirst + 14]), "+f"(d[kFirst + 15]),
        "+f"(d[kFirst + 16]), "+f"(d[kFirst + 17]), "+f"(d[kFirst + 18]), "+f"(d[kFirst + 19]),
        "+f"(d[kFirst + 20]), "+f"(d[kFirst + 21]), "+f"(d[kFirst + 22]), "+f"(d[kFirst + 23]),
        "+f"(d[kFirst + 24]), "+f"(d[kFirst + 25]), "+f"(d[kFirst + 26]), "+f"(d[kFirst + 27]),
        "+f"(d[kFirst + 28]), "+f"(d[kFirst + 29]), "+f"(d[kFirst + 30]), "+f"(d[kFirst + 31]),
        "+f"(d[kFirst + 32]), "+f"(d[kFirst + 33]), "+f"(d[kFirst + 34]), "+f"(d[kFirst + 35]),
        "+f"(d[kFirst + 36]), "+f"(d[kFirst + 37]), "+f"(d[kFirst + 38]), "+f"(d[kFirst + 39]),
        "+f"(d[kFirst + 40]), "+f"(d[kFirst + 41]), "+f"(d[kFirst + 42]), "+f"(d[kFirst + 43]),
        "+f"(d[kFirst + 44]), "+f"(d[kFirst + 45]), "+f"(d[kFirst + 46]), "+f"(d[kFirst + 47]),
        "+f"(d[kFirst + 48]), "+f"(d[kFirst + 49]), "+f"(d[kFirst + 50]), "+f"(d[kFirst + 51]),
        "+f"(d[kFirst + 52]), "+f"(d[kFirst + 53]), "+f"(d[kFirst + 54]), "+f"(d[kFirst + 55]),
        "+f"(d[kFirst + 56]), "+f"(d[kFirst + 57]), "+f"(d[kFirst + 58]), "+f"(d[kFirst + 59]),
        "+f"(d[kFirst + 60]), "+f"(d[kFirst + 61]), "+f"(d[kFirst + 62]), "+f"(d[kFirst + 63])
      : "l"(desc_a), "l"(desc_b), "r"(1));  // scale_d = 1: accumulate (acc starts at zero)
}

// What the producer loads for one tile.
struct TileLoad {
  const CUtensorMap* a_map;  // ring x (gate/up) or ring h (down); nullptr: A rows are gathered (gather mode)
  int a_row;                 // first ring row of the tile
  long long gather_row0;     // gather mode, gate/up: schedule-table row of the tile's first row
  const CUtensorMap* b_map0; // w_gate (gate/up) or w_down (down)
  int b_row0;
  const CUtensorMap* b_map1; // w_up (gate/up) or nullptr (down: one 256-row box)
  int b_row1;
  int num_kblocks;           // K / 64
};

// ---------------------------------------------------------------------------------------------------------
// Gather mode: the producer warpgroup copies the tile's A rows from the token buffers itself.
//
// Each 128-byte K-block row is copied by 8 lanes of 16 bytes (so a warp covers 4 whole rows per cp.async
// instruction and every L2 sector it touches is used entirely); the warpgroup covers 16 rows per pass and the
// tile in 8 passes. The 16-byte chunk c of tile row r lands where TMA's 128-byte swizzle would put it,
// chunk (c ^ (r % 8)) of the row's 128 bytes, so wgmma reads the stage with the same descriptor. The rows'
// source addresses are found once per tile into shared memory (SharedStorage::gather_src).
// ---------------------------------------------------------------------------------------------------------

// Producer thread `producer_thread` finds the source of tile row `producer_thread` (as dispatch_tile does) and
// publishes it in shared memory; the caller syncs the producer warpgroup before anyone reads the table.
// (Registers: the producer has 64, too few to keep 8 row pointers per thread alongside its task state.)
template <class Tiles>
__device__ __forceinline__ void gather_find_rows(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const Task& t,
                                                 long long row0, int producer_thread) {
  const int r = producer_thread;
  const int src_rank = p.src_rank[row0 + r];
  const int src_slot = p.src_slot[row0 + r];
  const char* src = nullptr;  // padding row: zero-filled
  if (src_rank >= 0) {
    if (src_rank >= p.num_ranks || src_slot < 0 || src_slot >= p.tokens_per_rank * p.top_k) {
      record_error(p, kErrBadSchedule, kCtrNone, t.rank, t.tile * Tiles::kBlockM + r, src_rank, src_slot, t.ticket);
    } else {
      src = reinterpret_cast<const char*>(p.x_ptrs[src_rank]) + static_cast<long long>(src_slot / p.top_k) * p.x_row_bytes;
    }
  }
  s.gather_src[r] = src;
  // Optional (p.gather_row_prefetch): the whole row into L2 at once, H x 2 contiguous bytes, so DRAM serves
  // the tile's rows as 128 long reads instead of 128 x (H / 64) scattered 128-byte pieces, one K block at a time.
  if (p.gather_row_prefetch && src != nullptr) bulk_prefetch_l2(src, static_cast<uint32_t>(p.hidden) * 2u);
}

// Byte offset in an A stage of the 16-byte chunk `chunk` (of 8) of tile row `row`: where TMA's 128-byte swizzle
// puts it, so the wgmma descriptors read a gathered stage like a TMA-written one (a CPU test checks this against
// CuTe's SW128 K-major layout).
__host__ __device__ __forceinline__ uint32_t sw128_chunk_offset(int row, int chunk) {
  return static_cast<uint32_t>(row * 128 + ((chunk ^ (row & 7)) << 4));
}

// This thread's 8 copies of K block `kb` into the A stage at shared address `stage_a`: chunk `producer_thread
// % 8` of rows producer_thread / 8 + 16 i. Row r = 16 i + j has r % 8 = j % 8 in every pass, so one swizzled
// offset serves all passes.
template <class Tiles>
__device__ __forceinline__ void gather_issue(const Sm90MoeParams& p, const SharedStorage<Tiles>& s, uint32_t stage_a,
                                             int kb, int num_kblocks, int producer_thread) {
  constexpr int kPasses = Tiles::kBlockM / Tiles::kGatherRowsPerPass;  // 8
  const int chunk = producer_thread & 7;
  const int row = producer_thread >> 3;
  const uint32_t dst = stage_a + sw128_chunk_offset(row, chunk);
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const char* src = s.gather_src[row + i * Tiles::kGatherRowsPerPass];
    const bool real = src != nullptr;
    cp_async_16(dst + i * Tiles::kGatherRowsPerPass * 128, real ? src + kb * 128 + chunk * 16 : p.ring_x,
                real ? 16u : 0u);
  }
  // Optional (p.gather_prefetch > 0): ask L2 for the K block `gather_prefetch` blocks ahead, one 128-byte line
  // per thread (the thread of chunk c takes its row of pass c). The idea was that token rows, unlike the ring,
  // miss L2 on a tile's first read; on the H200 it made no difference (mok/cuda/ROUNDS.md), so it is off.
  const int ahead = kb + p.gather_prefetch;
  if (p.gather_prefetch > 0 && ahead < num_kblocks) {
    const char* src = s.gather_src[row + chunk * Tiles::kGatherRowsPerPass];
    if (src != nullptr) prefetch_l2(src + ahead * 128);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Producer: fill the stage ring for one tile.
//
// Ring mode: thread 0 alone (TMA for A and B). Gather mode: every thread of the producer warpgroup calls this
// for every GEMM task. Gate/up: thread 0 loads B by TMA and all 128 threads copy A rows, one `.noinc`
// arrival each, so `full` expects 1 + 128 arrivals; down: thread 0 loads A and B by TMA and makes the 128
// arrivals itself, the other threads only step their pipeline position.
// `load_a` = false (TMA-fed tiles only): land B alone and leave each stage's A as it is. A down task spanning
// several column blocks of a tile with exactly kStages K blocks finds its A K block k in the same stage for every
// block (produce_task), so only its first block loads A.
// ---------------------------------------------------------------------------------------------------------
template <class Tiles>
__device__ __forceinline__ void produce_tile(const Sm90MoeParams& p, SharedStorage<Tiles>& s, PipeState<Tiles>& pipe,
                                             const TileLoad& load, const Task& t, int producer_thread,
                                             bool load_a = true) {
  const bool leader = producer_thread == 0;
  if (load.a_map == nullptr) {
    // NOTE: the producer warpgroup met at a barrier since it last read gather_src (the task hand-off), so the
    // table can be rewritten here; the barrier below publishes it.
    gather_find_rows<Tiles>(p, s, t, load.gather_row0, producer_thread);
    named_barrier_sync(NamedBarrier::kProducers, Tiles::kProducerThreads);
    for (int kb = 0; kb < load.num_kblocks; ++kb) {
      mbar_wait(p, &s.empty[pipe.stage], pipe.phase ^ 1u, kCtrMbarEmpty, static_cast<int>(pipe.stage));
      if (leader) {
        mbar_arrive_expect_tx(&s.full[pipe.stage], Tiles::kStageBytesB);
        const int k0 = kb * Tiles::kBlockK;
        tma_load_2d(s.b[pipe.stage], load.b_map0, &s.full[pipe.stage], k0, load.b_row0);
        tma_load_2d(s.b[pipe.stage] + Tiles::kStageBytesB / 2, load.b_map1, &s.full[pipe.stage], k0, load.b_row1);
      }
      gather_issue<Tiles>(p, s, smem_addr(s.a[pipe.stage]), kb, load.num_kblocks, producer_thread);
      cp_async_mbar_arrive_noinc(&s.full[pipe.stage]);
      pipe.advance();
    }
    return;
  }
  if (!leader) {  // gather mode, TMA-fed tile: keep the pipeline position in step with thread 0
    for (int kb = 0; kb < load.num_kblocks; ++kb) pipe.advance();
    return;
  }
  for (int kb = 0; kb < load.num_kblocks; ++kb) {
    // Fresh barriers sit in phase 0, so waiting for parity (phase ^ 1) passes on the first lap.
    mbar_wait(p, &s.empty[pipe.stage], pipe.phase ^ 1u, kCtrMbarEmpty, static_cast<int>(pipe.stage));
    // NOTE: the expected byte count must equal what the boxes land, or the stage never completes.
    mbar_arrive_expect_tx(&s.full[pipe.stage], load_a ? Tiles::kStageTxBytes : Tiles::kStageBytesB);
    if (p.gather_x) mbar_arrive_count(&s.full[pipe.stage], Tiles::kProducerThreads);
    const int k0 = kb * Tiles::kBlockK;
    if (load_a) tma_load_2d(s.a[pipe.stage], load.a_map, &s.full[pipe.stage], k0, load.a_row);
    tma_load_2d(s.b[pipe.stage], load.b_map0, &s.full[pipe.stage], k0, load.b_row0);
    if (load.b_map1 != nullptr) {
      tma_load_2d(s.b[pipe.stage] + Tiles::kStageBytesB / 2, load.b_map1, &s.full[pipe.stage], k0, load.b_row1);
    }
    pipe.advance();
  }
}

// One arrival per consumer warp on a stage's `empty` mbarrier (its wgmma reads of the stage are complete).
__device__ __forceinline__ void release_stage(uint64_t* empty, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(empty);
}

// ---------------------------------------------------------------------------------------------------------
// The stage loop of one consumer warpgroup, shared by its two tile shapes below: acc = 0, then per K block wait for
// the stage, `issue_kblock(stage, kb)` (converge the warp, build the descriptors, issue and commit K block kb's wgmma),
// and release stages to the producer.
// kOverlap = false: wait for each k-block's wgmma before releasing its stage (simplest ordering).
// kOverlap = true: keep one k-block of wgmma in flight and release the previous stage (standard SM90).
// ---------------------------------------------------------------------------------------------------------
template <class Tiles, bool kOverlap, class IssueKBlock>
__device__ __forceinline__ void consume_stages(const Sm90MoeParams& p, SharedStorage<Tiles>& s, PipeState<Tiles>& pipe,
                                               int num_kblocks, float (&acc)[128], IssueKBlock&& issue_kblock) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
  fence_accumulators(acc);

  uint32_t prev_stage = 0;
  for (int kb = 0; kb < num_kblocks; ++kb) {
    mbar_wait(p, &s.full[pipe.stage], pipe.phase, kCtrMbarFull, static_cast<int>(pipe.stage));
    issue_kblock(pipe.stage, kb);
    if constexpr (kOverlap) {
      wgmma_wait<1>();
      fence_accumulators(acc);
      if (kb > 0) release_stage(&s.empty[prev_stage], lane);
      prev_stage = pipe.stage;
    } else {
      wgmma_wait<0>();
      fence_accumulators(acc);
      release_stage(&s.empty[pipe.stage], lane);
    }
    pipe.advance();
  }
  if constexpr (kOverlap) {
    wgmma_wait<0>();
    fence_accumulators(acc);
    if (num_kblocks > 0) release_stage(&s.empty[prev_stage], lane);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Consumer (one warpgroup): acc[64 x 256] = A[rows 64*wg .. +63] * B^T over all K blocks.
// gathered_a: A was written by cp.async (generic proxy), so fence before wgmma reads it (async proxy).
// ---------------------------------------------------------------------------------------------------------
template <class Tiles, bool kOverlap>
__device__ __forceinline__ void consume_tile(const Sm90MoeParams& p, SharedStorage<Tiles>& s, PipeState<Tiles>& pipe,
                                             int num_kblocks, int consumer_wg, bool gathered_a, float (&acc)[128]) {
  static_assert(Tiles::kBlockN == 256, "the consumer issues m64n256k16");
  consume_stages<Tiles, kOverlap>(p, s, pipe, num_kblocks, acc, [&](uint32_t stage, int) {
    if (gathered_a) fence_proxy_async_shared();
    __syncwarp();  // wgmma is .sync.aligned: the warp must be converged after the (divergent) wait loop
    const uint64_t desc_a = make_sw128_kmajor_desc(smem_addr(s.a[stage]) + consumer_wg * 64 * 128);
    const uint64_t desc_b = make_sw128_kmajor_desc(smem_addr(s.b[stage]));
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < Tiles::kBlockK / 16; ++k) {
      wgmma_m64n256k16_bf16(acc, desc_advance_bytes(desc_a, k * 32), desc_advance_bytes(desc_b, k * 32), 1);
    }
    wgmma_commit();
  });
}

// ---------------------------------------------------------------------------------------------------------
// Consumer (one warpgroup) of a ping-pong down block (run_down_task): acc = A[all 128 rows] * B[columns
// 128 * column_half .. + 127]^T over all K blocks: acc[0..63] holds rows 0..63 and acc[64..127] rows 64..127, each
// in m64n128's fragment layout, so the epilogue stages them as it stages the two column halves of the usual tile.
// The other warpgroup multiplies the other column half of the same stages at another time (the turn barriers), so
// each stage is still released by all eight consumer warps, and the producer sees the same pipeline. The K order
// is the usual one (k-block ascending, four k16 steps each): every output element gets the same bits.
// `hand_over`: called once (num_kblocks >= 1: the launch requires I >= 64), right after the last K block's wgmma are
// issued (committed), before waiting for them: the other warpgroup's turn may start issuing while up to two K blocks
// of these drain, so the tensor cores need not empty between turns (close to CUTLASS's ping-pong, which hands over
// after the mainloop's issue, before its tail). Both warpgroups only read the stages; accumulators are registers;
// the stage releases still follow the waits.
// ---------------------------------------------------------------------------------------------------------
template <class Tiles, class HandOver>
__device__ __forceinline__ void consume_column_half(const Sm90MoeParams& p, SharedStorage<Tiles>& s,
                                                    PipeState<Tiles>& pipe, int num_kblocks, int column_half,
                                                    float (&acc)[128], HandOver&& hand_over) {
  static_assert(Tiles::kBlockN == 256 && Tiles::kBlockM == 128, "two 128-column halves of a 128-row tile");
  consume_stages<Tiles, true>(p, s, pipe, num_kblocks, acc, [&](uint32_t stage, int kb) {
    __syncwarp();  // wgmma is .sync.aligned: the warp must be converged after the (divergent) wait loop
    const uint64_t desc_a = make_sw128_kmajor_desc(smem_addr(s.a[stage]));  // rows 0..63; 8 KB on: 64..127
    // B's rows are the output columns: rows 128 * column_half .. of the stage's 256 (16 KB further, 1024-aligned).
    const uint64_t desc_b = make_sw128_kmajor_desc(smem_addr(s.b[stage]) + column_half * 128 * 128);
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < Tiles::kBlockK / 16; ++k) {
      wgmma_m64n128k16_bf16<0>(acc, desc_advance_bytes(desc_a, k * 32), desc_advance_bytes(desc_b, k * 32));
      wgmma_m64n128k16_bf16<64>(acc, desc_advance_bytes(desc_a, 64 * 128 + k * 32), desc_advance_bytes(desc_b, k * 32));
    }
    wgmma_commit();
    if (kb + 1 == num_kblocks) hand_over();
  });
}

// ---------------------------------------------------------------------------------------------------------
// Consumer (one warpgroup): wait for and release `num_kblocks` stages without reading them. A warpgroup whose 64
// rows of the tile are all padding (Task::padding_half) runs this over all of them and then consume_tile over 0 K
// blocks (acc = 0, what its zero rows would give; task_mainloop), so the other warpgroup has the SM's tensor cores
// alone. Each stage is still waited for before it is released, so that the arrival counts toward the stage's current
// phase.
// NOTE: a loop count rather than a branch around the wgmma: ptxas serialises every wgmma behind such a branch
// (C7520, "WG.AR in divergent path").
// ---------------------------------------------------------------------------------------------------------
template <class Tiles>
__device__ __forceinline__ void pass_stages(const Sm90MoeParams& p, SharedStorage<Tiles>& s, PipeState<Tiles>& pipe,
                                            int num_kblocks) {
  const int lane = threadIdx.x & 31;
  for (int kb = 0; kb < num_kblocks; ++kb) {
    mbar_wait(p, &s.full[pipe.stage], pipe.phase, kCtrMbarFull, static_cast<int>(pipe.stage));
    release_stage(&s.empty[pipe.stage], lane);
    pipe.advance();
  }
}

}  // namespace mok::sm90
