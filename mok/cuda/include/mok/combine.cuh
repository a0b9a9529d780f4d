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
//
// Top-1 (p.fuse_top1): a token has one slot, so the down epilogue applies the sum's arithmetic itself and
// writes the output row; there are then no combine slots and no combine tasks (the sum would be a tail of
// pure memory traffic, T x H read and written, after the last down tile).
#pragma once

#include <cuda_bf16.h>
#include <cstdint>

#include "epilogue_staging.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "tma.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

__device__ __forceinline__ uint4 load_l2(const uint4* ptr) {
  // Slots were written by other SMs during this launch: read them from L2, never from a stale L1 line.
  return __ldcg(ptr);
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

// acc += w * y for 8 bf16 values of y, each product rounded before the add (the contract's arithmetic: no FMA).
__device__ __forceinline__ void accumulate_weighted(float (&acc)[8], float w, const uint4& raw) {
  float y[8];
  unpack_bf16x8(raw, y);
#pragma unroll
  for (int e = 0; e < 8; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(w, y[e]));
}

// out = bf16(0 + w * y) for 8 bf16 values of y: combine_block's arithmetic for a token with one slot.
__device__ __forceinline__ uint4 weighted_top1(const uint4& y_raw, float w) {
  float y[8];
  unpack_bf16x8(y_raw, y);
#pragma unroll
  for (int e = 0; e < 8; ++e) y[e] = __fadd_rn(0.0f, __fmul_rn(w, y[e]));
  return pack_bf16x8(y);
}

// The schedule-table entries (source rank, source slot) of rows `rows[i]` of a down tile: the first of
// push_destinations' round trips, on its own so that it can be issued early (consumer_row_lookup).
template <class Tiles, int N>
__device__ __forceinline__ void load_row_entries(const Sm90MoeParams& p, const Task& t, const int (&rows)[N],
                                                 int (&src_rank)[N], int (&src_slot)[N]) {
  const long long row0 = table_row0<Tiles>(p, t);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    src_rank[i] = __ldg(p.src_rank + row0 + rows[i]);
    src_slot[i] = __ldg(p.src_slot + row0 + rows[i]);
  }
}

// push_destinations' second part: from the rows' table entries (load_row_entries) to their destinations.
// `count`: pushes to count per row (the column blocks that will be pushed from these destinations), 0 for none.
template <class Tiles, int N>
__device__ __forceinline__ void resolve_destinations(const Sm90MoeParams& p, const Task& t, const int (&rows)[N],
                                                     const int (&src_rank)[N], const int (&src_slot)[N], int count,
                                                     int* push_count, uint4* (&dst)[N], float (&weight)[N]) {
  const int slots_per_rank = p.tokens_per_rank * p.top_k;
  const long long row_chunks = p.hidden / 8;
  const bool fuse = p.fuse_top1 != 0;
  bool valid[N];
  long long base[N], weights[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    valid[i] = src_rank[i] >= 0 && src_rank[i] < p.num_ranks && src_slot[i] >= 0 && src_slot[i] < slots_per_rank;
    base[i] = valid[i] ? __ldg((fuse ? p.out_ptrs : p.combine_ptrs) + src_rank[i]) : 0;
    weights[i] = valid[i] && fuse ? __ldg(p.weight_ptrs + src_rank[i]) : 0;
  }
#pragma unroll
  for (int i = 0; i < N; ++i) {
    weight[i] = weights[i] != 0 ? __ldg(reinterpret_cast<const float*>(weights[i]) + src_slot[i]) : 0.0f;
    dst[i] = valid[i] ? reinterpret_cast<uint4*>(base[i]) + src_slot[i] * row_chunks : nullptr;
  }
  if (count == 0) return;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    if (valid[i]) {
      if (!fuse) atomicAdd(push_count + src_rank[i], count);
    } else if (src_rank[i] >= 0) {
      record_error(p, kErrBadSchedule, kCtrNone, t.rank, t.tile * Tiles::kBlockM + rows[i], src_rank[i], src_slot[i],
                   t.ticket);
    }
  }
}

// Where rows `rows[i]` of a down tile go (nullptr: padding, or an inconsistent schedule) and, fused top-1, their
// router weights (else 0). With `count` (the lane that speaks for its rows) each row is counted for its source rank
// in `push_count` (once: one column block) and an inconsistent schedule is recorded. Shared by the consumers' push below and the store warps
// (store_warps.cuh), which must send every row to the same place.
// NOTE: the loads go in batches, every row's table entries first, then the pointer tables, then (fused top-1) the
// weights, so N rows wait for two L2 round trips (fused top-1: three) rather than 2N (3N). The consumers go further
// and give each lane one row (consumer_row_lookup). Row by row, eight rows per consumer thread (round 13 and before),
// each row's loads waited behind the previous row's counting and error branch: 16 round trips at anchor-2 (top-16,
// no weights), about 3 us of every 8 us down task there, after the mainloop (mok/cuda/ROUNDS.md, round 14).
template <class Tiles, int N>
__device__ __forceinline__ void push_destinations(const Sm90MoeParams& p, const Task& t, const int (&rows)[N],
                                                  bool count, int* push_count, uint4* (&dst)[N], float (&weight)[N]) {
  int src_rank[N], src_slot[N];
  load_row_entries<Tiles>(p, t, rows, src_rank, src_slot);
  resolve_destinations<Tiles>(p, t, rows, src_rank, src_slot, count ? 1 : 0, push_count, dst, weight);
}

// One consumer lane's share of a down tile's row lookups. The 16 lanes that copy the same 8 rows (rows
// 64 * consumer_wg + (t128 / 16) + 8 it, chunk t128 % 16 of each) split them: lane chunk looks up row it = chunk % 8
// (lanes 8..15 repeat lanes 0..7's rows: the same cache lines, and no lane idles in the shuffles), and only lanes
// 0..7 count them. The table loads are issued before the tile's mainloop (run_consumer_task) and first used after
// it, so their L2 round trip passes while the tensor cores run; only the two table entries stay live across the
// mainloop. resolve_shared_destinations resolves them and hands the 8 rows' results to every lane.
struct RowLookup {
  int src_rank;
  int src_slot;
};

__device__ __forceinline__ int consumer_lookup_row(int consumer_wg) {
  const int t128 = threadIdx.x & 127;
  return 64 * consumer_wg + (t128 >> 4) + 8 * (t128 & 7);
}

template <class Tiles>
__device__ __forceinline__ RowLookup consumer_row_lookup(const Sm90MoeParams& p, const Task& t, int consumer_wg) {
  const int my_row[1] = {consumer_lookup_row(consumer_wg)};
  int src_rank[1], src_slot[1];
  load_row_entries<Tiles>(p, t, my_row, src_rank, src_slot);
  return {src_rank[0], src_slot[0]};
}

// The destination (and, fused, router weight) of the row this lane looked up (consumer_row_lookup): with `count` > 0,
// lanes 0..7 of each 16 count their row `count` times (once per column block pushed from it) and record an
// inconsistent schedule. Three registers, so a down task of several column blocks keeps it across its mainloops.
struct LaneDestination {
  uint4* dst;
  float weight;
};

// down_tma: the inverse map, written by the down task that holds a tile's first column block: this lane's row (the
// one it looked up) is where y holds its (source rank, token * K + k). Generic stores, released with the task like
// the pushed rows are, and read by the weighted sum after it has acquired every down task of its source rank.
template <class Tiles>
__device__ __forceinline__ void write_inverse_map_entry(const Sm90MoeParams& p, const Task& t, int consumer_wg,
                                                        const RowLookup& entries) {
  const int slots_per_rank = p.tokens_per_rank * p.top_k;
  const bool valid = entries.src_rank >= 0 && entries.src_rank < p.num_ranks && entries.src_slot >= 0 &&
                     entries.src_slot < slots_per_rank;  // (an inconsistent row is reported by the lookup)
  if ((threadIdx.x & 15) < 8 && valid) {  // lanes 8..15 of each 16 repeat lanes 0..7's rows
    p.y_rows[static_cast<long long>(entries.src_rank) * slots_per_rank + entries.src_slot] =
        static_cast<int>(table_row0<Tiles>(p, t)) + consumer_lookup_row(consumer_wg);
  }
}

template <class Tiles>
__device__ __forceinline__ LaneDestination resolve_lane_destination(const Sm90MoeParams& p, const Task& t,
                                                                    int consumer_wg, const RowLookup& entries,
                                                                    int count, int* push_count) {
  const int t128 = threadIdx.x & 127;
  const int my_row[1] = {consumer_lookup_row(consumer_wg)};
  const int src_rank[1] = {entries.src_rank}, src_slot[1] = {entries.src_slot};
  uint4* my_dst[1];
  float my_w[1];
  resolve_destinations<Tiles>(p, t, my_row, src_rank, src_slot, (t128 & 15) < 8 ? count : 0, push_count, my_dst,
                              my_w);
  return {my_dst[0], my_w[0]};
}

// The destinations (and router weights) of the 8 rows this thread copies, by shuffle from the lanes that looked
// them up. Timing ablation kAblatePush: rows counted as pushed are stored in place instead.
template <class Tiles>
__device__ __forceinline__ void share_destinations(const Sm90MoeParams& p, const Task& t, int consumer_wg,
                                                   const LaneDestination& mine, uint4* (&dst_row)[8],
                                                   float (&w_row)[8]) {
  const int t128 = threadIdx.x & 127;
  const int lane = threadIdx.x & 31;
  const int row_chunks = p.hidden / 8;
  const int slots_per_rank = p.tokens_per_rank * p.top_k;
  const bool fuse = p.fuse_top1 != 0;
  const bool contiguous = (p.ablate & kAblatePush) != 0;  // timing ablation: a plain GEMM's output store
#pragma unroll
  for (int it = 0; it < 8; ++it) {
    const int row = 64 * consumer_wg + (t128 >> 4) + 8 * it;
    const int owner = (lane & 16) | it;  // the lane of this 16-lane group that looked row `it` up
    dst_row[it] = reinterpret_cast<uint4*>(
        __shfl_sync(0xFFFFFFFFu, reinterpret_cast<unsigned long long>(mine.dst), owner));
    w_row[it] = __shfl_sync(0xFFFFFFFFu, mine.weight, owner);
    if (contiguous && dst_row[it] != nullptr) {  // counted as pushed (the combine still waits), stored in place
      const int wrap = fuse ? p.tokens_per_rank : slots_per_rank;
      const long long at = (static_cast<long long>(t.tile) * Tiles::kBlockM + row) % wrap;
      dst_row[it] = reinterpret_cast<uint4*>(fuse ? p.out_ptrs[t.rank] : p.combine_ptrs[t.rank]) + at * row_chunks;
    }
  }
}

// Both of the above: the destinations (and, fused, router weights) of the 8 rows this thread copies.
template <class Tiles>
__device__ __forceinline__ void resolve_shared_destinations(const Sm90MoeParams& p, const Task& t, int consumer_wg,
                                                            const RowLookup& entries, int count, int* push_count,
                                                            uint4* (&dst_row)[8], float (&w_row)[8]) {
  const LaneDestination mine = resolve_lane_destination<Tiles>(p, t, consumer_wg, entries, count, push_count);
  share_destinations<Tiles>(p, t, consumer_wg, mine, dst_row, w_row);
}

// One half (128 columns) of this consumer warpgroup's 64 rows: y = bf16(acc) into the staging rows, then each row's
// 256 contiguous bytes into its (token, k) slot on the source rank (fused: into the token's output row, times its
// router weight). The warpgroup meets before the reads (the rows are staged) and after them (the staging is free).
template <class Tiles>
__device__ __forceinline__ void push_half(const Sm90MoeParams& p, const Task& t, SharedStorage<Tiles>& s,
                                          const float (&acc)[128], int consumer_wg, int half,
                                          uint4* const (&dst_row)[8], const float (&w_row)[8]) {
  const int t128 = threadIdx.x & 127;
  const int chunk = t128 & 15;
  const bool scale = p.fuse_top1 && !(p.ablate & kAblatePush);
  stage_accumulator_half<Tiles>(s.staging, consumer_wg, acc, half);
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);
  const int col = t.nblock * Tiles::kBlockN + half * Tiles::kHalfN + chunk * 8;
  // The last column block may reach past H; timing ablation kAblateStores: no global store.
  if (col < p.hidden && !(p.ablate & kAblateStores)) {
#pragma unroll
    for (int it = 0; it < 8; ++it) {
      if (dst_row[it] == nullptr) continue;
      const int row = 64 * consumer_wg + (t128 >> 4) + 8 * it;
      uint4 value = load_staged_chunk<Tiles>(s.staging, row, chunk);
      if (scale) value = weighted_top1(value, w_row[it]);
      dst_row[it][col / 8] = value;
    }
  }
  named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);
}

// down_tma (p.down_tma): this consumer warpgroup's 64 rows x 256 columns of down block t.nblock into y at their
// schedule rows, by TMA: per half, the rows are staged (StagingLayout::kTmaBoxes, what the y map reads), made
// visible to the async proxy, and thread 0 of the warpgroup stores the half's two 64-column boxes. The consumers
// issue two stores per half instead of 16 KB of their own. Before the staging is written again, thread 0 waits
// until its earlier stores have been read out of it (not until they are written: finish_tma_stores does that once
// per task): for the first half before the second is staged, for the second only when the task's next block is
// staged, so that half drains during the next block's mainloop. Same bits: y = bf16(acc) as in the push; the
// weighted sum reads them through p.y_rows.
// Ping-pong (kPingPong: the kernel instantiation that runs it, p.down_ping_pong): the warpgroup holds all 128 rows of
// its column half instead (consume_column_half), so `half` walks the rows: acc[64 * half ..] is rows 64 * half .., at
// columns 128 * consumer_wg ...
template <class Tiles, bool kPingPong>
__device__ __forceinline__ void store_down_block_tma(const Sm90MoeParams& p, const Task& t, SharedStorage<Tiles>& s,
                                                     const float (&acc)[128], int consumer_wg, bool staging_draining) {
  if (p.ablate & kAblateEpilogue) return;  // timing ablation, as push_down_block
  const bool leader = (threadIdx.x & 127) == 0;
  const int row0 = static_cast<int>(table_row0<Tiles>(p, t));  // y row of the tile's first
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + 64 * (kPingPong ? half : consumer_wg);
    const int column_half = kPingPong ? consumer_wg : half;
    if (half == 1 || staging_draining) {  // the previous half's boxes are still being read out of the staging
      if (leader) bulk_wait_group_read_all();
      named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);
    }
    stage_accumulator_half<Tiles, StagingLayout::kTmaBoxes>(s.staging, consumer_wg, acc, half);
    fence_proxy_async_shared();  // this thread's staged rows, visible to the TMA (async proxy) that reads them
    named_barrier_sync(consumer_wg_barrier(consumer_wg), 128);
    if (leader && !(p.ablate & kAblateStores)) {  // the half's two 64-column boxes (a box past H is not issued)
      issue_staged_boxes<Tiles>(&p.tmap_y, s.staging, consumer_wg,
                                t.nblock * Tiles::kBlockN + column_half * Tiles::kHalfN, p.hidden, row);
    }
  }
}

// One consumer warpgroup: its 64 rows x 256 output columns (column block t.nblock) -> the source ranks' combine
// slots, at the destinations resolve_shared_destinations found for the tile's rows (run_down_task resolves them
// once per down task, for every column block of the task).
//
// With p.fuse_top1 (top_k == 1) a slot is the token itself, so the weighted sum of its one slot is done here:
// out[src_rank][token] = bf16(0 + w * y), with y rounded to bf16 first and the add kept (0 + -0 = +0), which is
// exactly combine_block's arithmetic for K = 1. Then there are no slots, no combine tasks and no combine tail.
template <class Tiles>
__device__ __forceinline__ void push_down_block(const Sm90MoeParams& p, const Task& t, SharedStorage<Tiles>& s,
                                                const float (&acc)[128], int consumer_wg, uint4* const (&dst_row)[8],
                                                const float (&w_row)[8]) {
  static_assert(Tiles::kBlockN == 2 * Tiles::kHalfN, "the down tile is staged in two halves");
  // Timing ablation: rows are counted (the combine still waits for them) but nothing is staged or stored.
  if (p.ablate & kAblateEpilogue) return;
#pragma unroll
  for (int half = 0; half < 2; ++half) push_half<Tiles>(p, t, s, acc, consumer_wg, half, dst_row, w_row);
}

// Early combine (t.minibatch >= 0): before the consumers read a block's slots, their thread 0 waits until every
// rank's down tasks of steps 0..m finished (m: the block's ready step), then all meet. It is the one dependency
// not waited for when the task is claimed: the producer has no registers to spare for it, and waiting here cannot
// deadlock either, since every task it waits for has a smaller ticket and none of them needs this CTA's consumers
// (the tasks before this one in the CTA's own queue are finished by then, or, store warps, in their hands).
// `steps_done` (the consumers' own copy, carried from task to task) skips the steps already seen finished: this
// CTA's combine blocks come in ascending steps, so each step's counter is checked once per CTA.
__device__ __forceinline__ void wait_combine_ready(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                                   int consumer_thread, int num_consumer_threads, int& steps_done) {
  const int ready = v.combine_ready_step(t.minibatch);
  if (consumer_thread == 0) {
    for (; steps_done <= ready; ++steps_done) {
      const Dependency d = down_step_dependency(v, p.ctr, t.rank, steps_done);
      if (!wait_counter_geq(p, p.counters + d.offset, d.expected, d.counter_id, d.rank, d.index, t.ticket)) break;
    }
  }
  steps_done = ready + 1;  // every consumer thread keeps the same count (only thread 0's is read)
  // Thread 0's warp converges before the barrier, so that it takes its next task (whose slot the producer may
  // rewrite once lane 0 arrives on task_empty) as one warp again.
  __syncwarp();
  // Publishes thread 0's acquire to the others (CTA scope), like the producer's task hand-off does.
  named_barrier_sync(NamedBarrier::kConsumers, num_consumer_threads);
}

// The weighted sum for kCombineTokens tokens (fewer at the end) of source rank t.rank, all H columns, by `num_threads`
// threads; each thread owns 8 consecutive columns of one token per item, kCombineItems independent items at a
// time. The tokens are positions t.tile.. of the rank's token order: the tokens themselves, or, with early
// combine, entries of p.combine_tokens (tokens sorted by the step after which all their rows are pushed).
// NOTE: without early combine this runs as the layer's tail (it waits for every push of its source rank), where
// nothing else hides memory latency; with it, only the blocks placed in the last step do (their tokens are ready
// after the last step or the one before). With one item per thread the compiler keeps 4 slot loads (k unrolled
// by 4) of 16 bytes in flight per thread, about 2 TB/s for the whole GPU by Little's law (an estimate, not
// measured); kCombineItems independent items multiply the loads in flight. The arithmetic of every output
// element is unchanged (k ascending, product rounded before the add).
template <class Tiles>
__device__ __forceinline__ void combine_rows(const Sm90MoeParams& p, const Task& t, int thread, int num_threads) {
  constexpr int kCombineItems = 4;
  const int source = t.rank;
  const int top_k = p.top_k;
  const int row_chunks = p.hidden / 8;
  const int tokens = min(Tiles::kCombineTokens, p.tokens_per_rank - t.tile);
  const int total = tokens * row_chunks;
  const int* order = p.combine_tokens != nullptr ? p.combine_tokens + static_cast<long long>(source) * p.tokens_per_rank
                                                 : nullptr;
  const uint4* slots = reinterpret_cast<const uint4*>(p.combine_ptrs[source]);
  const float* weights = reinterpret_cast<const float*>(p.weight_ptrs[source]);
  uint4* out = reinterpret_cast<uint4*>(p.out_ptrs[source]);

  for (int base = thread; base < total; base += num_threads * kCombineItems) {
    long long slot0[kCombineItems];  // slot of (token, k = 0) of each item
    int chunk[kCombineItems];
    bool valid[kCombineItems];
    float acc[kCombineItems][8];
#pragma unroll
    for (int u = 0; u < kCombineItems; ++u) {
      // An item past the end recomputes item 0 (always valid) and is not stored: no branch in the k loop.
      valid[u] = base + u * num_threads < total;
      const int idx = valid[u] ? base + u * num_threads : base;
      const int position = t.tile + idx / row_chunks;
      const int token = order != nullptr ? __ldg(order + position) : position;
      chunk[u] = idx - (idx / row_chunks) * row_chunks;
      slot0[u] = static_cast<long long>(token) * top_k;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[u][e] = 0.0f;
    }
#pragma unroll 4
    for (int k = 0; k < top_k; ++k) {
#pragma unroll
      for (int u = 0; u < kCombineItems; ++u) {
        const long long slot = slot0[u] + k;
        accumulate_weighted(acc[u], __ldg(weights + slot), load_l2(slots + slot * row_chunks + chunk[u]));
      }
    }
#pragma unroll
    for (int u = 0; u < kCombineItems; ++u) {
      if (valid[u]) out[slot0[u] / top_k * row_chunks + chunk[u]] = pack_bf16x8(acc[u]);
    }
  }
}

// down_tma: the same weighted sum, each (token, k) row read from y at row p.y_rows[source][token * K + k]. Those
// rows and the router weights of the task's tokens are first copied into a table in the staging shared memory
// (free during a combine task: down_tma runs without store warps, every GEMM epilogue's TMA stores were waited for
// before its warpgroup's barrier (finish_tma_stores), and the kConsumers barrier below holds both warpgroups, which
// with the signal warp need not be in step otherwise), so that the k loop's row lookups are shared-memory loads rather than a global load that
// each row load would wait for. Reading p.y_rows in the loop cost 13% of the combine at anchor-2 (round 19), where
// two items per thread were all that fitted without spills.
// NOTE: a near-copy of combine_rows on purpose. One loop for both sums, with the row lookup passed in as a function
// (branch down-tma-wg-local, ac84e8f), made the whole kernel 1.11x slower at anchors 1-2 with down_tma and 1.04-1.06x
// with the push (round 20, call 3), with the same bits.
struct CombineRow {
  int row;       // y row of (token, k)
  float weight;  // its router weight
};

// The row of y holding source rank `source`'s (token, k), from the inverse map, checked against the schedule tables:
// an inconsistent schedule can leave an entry out of range (never written) or at an earlier launch's row (two table
// rows naming one slot, so another has none). Such an entry is recorded as an error and row 0 returned, a row of y, so
// the sum reads nothing outside it (the launch has failed anyway). Read with ld.global.cg: the combine tasks read the
// map in the launch that writes it (write_inverse_map_entry), where __ldg might not see the write.
__device__ __forceinline__ int checked_y_row(const Sm90MoeParams& p, int source, int token, int k, int ticket) {
  const long long slot = static_cast<long long>(token) * p.top_k + k;
  int row = __ldcg(p.y_rows + static_cast<long long>(source) * p.tokens_per_rank * p.top_k + slot);
  const bool holds = row >= 0 && row < static_cast<long long>(p.num_ranks) * p.capacity &&
                     __ldg(p.src_rank + row) == source && __ldg(p.src_slot + row) == slot;
  if (!holds) {
    record_error(p, kErrBadSchedule, kCtrNone, source, token, k, row, ticket);
    row = 0;
  }
  return row;
}

template <class Tiles>
__device__ __forceinline__ void combine_rows_from_y(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const Task& t,
                                                    int thread, int num_threads) {
  constexpr int kCombineItems = 4;
  const int source = t.rank;
  const int top_k = p.top_k;
  const int row_chunks = p.hidden / 8;
  const int tokens = min(Tiles::kCombineTokens, p.tokens_per_rank - t.tile);
  const int total = tokens * row_chunks;
  const int* order = p.combine_tokens != nullptr ? p.combine_tokens + static_cast<long long>(source) * p.tokens_per_rank
                                                 : nullptr;
  const float* weights = reinterpret_cast<const float*>(p.weight_ptrs[source]);
  const uint4* y = reinterpret_cast<const uint4*>(p.y);
  uint4* out = reinterpret_cast<uint4*>(p.out_ptrs[source]);
  CombineRow* table = reinterpret_cast<CombineRow*>(s.staging);  // [tokens][top_k] (the launch bounds top_k)

  // Both warpgroups are done with their last epilogue's staging (each warpgroup takes its tasks on its own).
  named_barrier_sync(NamedBarrier::kConsumers, num_threads);
  for (int i = thread; i < tokens * top_k; i += num_threads) {
    const int local = i / top_k;
    const int position = t.tile + local;
    const int token = order != nullptr ? __ldg(order + position) : position;
    const int k = i - local * top_k;
    table[i] = CombineRow{checked_y_row(p, source, token, k, t.ticket),
                          __ldg(weights + static_cast<long long>(token) * top_k + k)};
  }
  named_barrier_sync(NamedBarrier::kConsumers, num_threads);  // the table is complete

  for (int base = thread; base < total; base += num_threads * kCombineItems) {
    int local[kCombineItems];  // the item's token, as a position in this task
    int chunk[kCombineItems];
    bool valid[kCombineItems];
    float acc[kCombineItems][8];
#pragma unroll
    for (int u = 0; u < kCombineItems; ++u) {
      valid[u] = base + u * num_threads < total;  // as combine_rows: an item past the end redoes item 0
      const int idx = valid[u] ? base + u * num_threads : base;
      local[u] = idx / row_chunks;
      chunk[u] = idx - local[u] * row_chunks;
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[u][e] = 0.0f;
    }
#pragma unroll 4
    for (int k = 0; k < top_k; ++k) {
#pragma unroll
      for (int u = 0; u < kCombineItems; ++u) {
        const CombineRow entry = table[local[u] * top_k + k];
        accumulate_weighted(acc[u], entry.weight, load_l2(y + static_cast<long long>(entry.row) * row_chunks + chunk[u]));
      }
    }
#pragma unroll
    for (int u = 0; u < kCombineItems; ++u) {
      if (!valid[u]) continue;
      const int token = order != nullptr ? __ldg(order + t.tile + local[u]) : t.tile + local[u];
      out[static_cast<long long>(token) * row_chunks + chunk[u]] = pack_bf16x8(acc[u]);
    }
  }
  named_barrier_sync(NamedBarrier::kConsumers, num_threads);  // every table read is done: the staging is free
}

template <class Tiles>
__device__ __forceinline__ void combine_block(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const Task& t,
                                              int thread, int num_threads) {
  if (p.ablate & kAblateCombine) return;  // timing ablation
  if (p.down_tma) {
    combine_rows_from_y<Tiles>(p, s, t, thread, num_threads);
  } else {
    combine_rows<Tiles>(p, t, thread, num_threads);
  }
}

}  // namespace mok::sm90
