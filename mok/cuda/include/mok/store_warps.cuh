// Store warps: half of each down tile's rows leave the staging tile through two otherwise idle producer warps, so
// the consumer warpgroups go on to their next mainloop once they have pushed the first half and staged the second.
//
// Why: both consumer warpgroups finish a tile together (one 128 x 256 tile, 64 rows each), so while they copy the
// staged rows out to the combine slots no wgmma runs: a down tile writes 64 KB (128 rows x 256 bf16) to rows
// scattered over the combine slots. Warps 2 and 3 of the producer warpgroup (idle in ring mode: thread 0 drives TMA,
// warp 1 signals) take the second half of the copy over, which then overlaps the next tile's mainloop. (Handing the
// gate/up tiles' h rows over as well, or h and the saved gate/up rows, measured no better: mok/cuda/ROUNDS.md,
// round 10.)
//
// Hand-off, per consumer warpgroup w and store warp 2 + w (the staging rows 64w .. 64w + 63 are w's alone).
// The consumers push the first half of their rows themselves, the store warp the second (round 15: 1-10% faster
// than handing both halves over, which made the consumers wait for the store warp's first half):
//
//     consumers of w                           store warp 2 + w                      signal warp
//     wait drained[w] (previous use read)
//     stmatrix half 0 -> staging, rows -> combine slots (as down_epilogue_push)
//     stmatrix half 1, arrive staged[w] -----> wait staged[w]
//     next task's mainloop                     rows -> combine slots, arrive drained[w]
//                                              arrive stores_done[slot] ------------> wait stores_done[slot]
//                                                                                     fence, counters
//
// Every staging use (the gate/up epilogues too) first waits for drained[w], so the tile is never rewritten
// before the store warp read it. The store warps walk the task queue like the consumers (they count in the
// slot's `task_empty`), so they see every task; down tasks and (bf16) gate/up tasks involve them. The signal
// warp waits for the task slot's `stores_done` before it signals such a task, so no reader sees rows the store
// warp has not written, and the push counts (`push_count`, added by the store warps) are complete when it reads
// them.
// NOTE: one `stores_done` per queue slot, not one in all: the store warps may finish two tasks before the signal
// warp looks at the first, and one barrier would then have moved two phases on (parity cannot tell). A slot is
// refilled only after the signal warp has handled its task, so a slot's barrier is never two phases on.
//
// Arithmetic and destinations are down_epilogue_push's (combine.cuh), so the bits do not change.
//
// Gate/up tasks (bf16, round 38): the consumers stage their h rows (two TMA boxes per warpgroup) and hand the whole
// staging over the same way; lane 0 of the store warp issues the two TMA stores, arrives on `drained` once the TMA has
// read them, waits until they are written and arrives on `stores_done`, and the signal warp signals the task after
// that, as for a down task. Without the store warps the consumers' thread 0 does that wait itself (store_h_tma), and
// the warpgroup waits with it before its next mainloop. Same bits: the same staged values reach the same rows.
#pragma once

#include <cstdint>

#include "combine.cuh"
#include "epilogue_staging.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "tma.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

constexpr int kFirstStoreWarp = 2;  // warps 2 .. 2 + kNumConsumerWG - 1 of the producer warpgroup
static_assert(kFirstStoreWarp + Sm90Tiles::kNumConsumerWG <= Sm90Tiles::kProducerThreads / 32,
              "one idle producer warp per consumer warpgroup (warp 0 drives TMA, warp 1 signals)");
static_assert(Sm90Tiles::kTaskQueue <= 32, "the signal warp keeps one stores_done parity bit per queue slot");

// Whether the store warps take a gate/up task's h rows (bf16 only: MXFP8's h is rounded per block and stored by the
// consumers as rows).
__device__ __forceinline__ bool h_stored_by_store_warps(const Sm90MoeParams& p) { return p.store_warps && !p.mxfp8; }

// The tasks the signal warp signals only after both store warps arrived on the slot's `stores_done`.
__device__ __forceinline__ bool stored_by_store_warps(const Sm90MoeParams& p, const Task& t) {
  return p.store_warps && (t.kind == kTaskDown || (t.kind == kTaskGateUp && h_stored_by_store_warps(p)));
}

// A wait whose outcome is the same in every lane: on a recorded error or a time-out some lanes could give up
// while others still see the phase complete, and a warp that returns in part would leave its full-mask
// __syncwarp and shuffles undefined (a hang instead of the error report).
__device__ __forceinline__ bool warp_wait(const Sm90MoeParams& p, uint64_t* bar, uint32_t parity, int counter_id,
                                          int index) {
  return __all_sync(0xFFFFFFFFu, mbar_wait(p, bar, parity, counter_id, index));
}

// Consumer side. `uses` counts this warpgroup's staging uses handed to its store warp (one per down tile: its
// second half), the phase of `drained` the next use must see completed.
struct StagingHandoff {
  uint32_t uses = 0;
};

// Before this warpgroup writes the staging rows: its store warp has read the last rows handed to it. A no-op
// without store warps (the consumers' own barriers order every use then).
template <class Tiles>
__device__ __forceinline__ void wait_staging_free(const Sm90MoeParams& p, SharedStorage<Tiles>& s, int consumer_wg,
                                                  const StagingHandoff& handoff) {
  if (!p.store_warps || handoff.uses == 0) return;
  mbar_wait(p, &s.drained[consumer_wg], (handoff.uses - 1) & 1u, kCtrMbarDrained, consumer_wg);
}

// The warpgroup's staged rows go to its store warp (each warp after its own stmatrix: release at CTA scope).
template <class Tiles>
__device__ __forceinline__ void hand_staging_to_store_warp(SharedStorage<Tiles>& s, int consumer_wg,
                                                           StagingHandoff& handoff) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) mbar_arrive(&s.staged[consumer_wg]);
  ++handoff.uses;
}

// Down epilogue with store warps: the consumers push the first half of their rows themselves
// (as down_epilogue_push does, without counting: the store warp counts every row) and hand the second half to the
// store warp, which stores it while they run the next mainloop. With both halves handed over, the consumers waited
// for the store warp to finish the first before they could stage the second.
// NOTE: both halves must go to the same destinations, so this path never runs under a timing ablation (kAblatePush
// would send the consumers' half in place and the store warp's to the slots): the launch turns the store warps off
// whenever `ablate` is set (csrc/sm90_moe_forward.cu).
template <class Tiles>
__device__ __forceinline__ void down_epilogue_staged(const Sm90MoeParams& p, const Task& t, SharedStorage<Tiles>& s,
                                                     const float (&acc)[128], int consumer_wg,
                                                     const RowLookup& entries, StagingHandoff& handoff) {
  uint4* dst_row[8];
  float w_row[8];
  resolve_shared_destinations<Tiles>(p, t, consumer_wg, entries, 0, nullptr, dst_row, w_row);
  wait_staging_free<Tiles>(p, s, consumer_wg, handoff);  // the store warp has read the last rows handed to it
  push_half<Tiles>(p, t, s, acc, consumer_wg, 0, dst_row, w_row);
  stage_accumulator_half<Tiles>(s.staging, consumer_wg, acc, 1);
  hand_staging_to_store_warp<Tiles>(s, consumer_wg, handoff);
}

// Rows [first, first + 32) of the warpgroup's 64 staged rows out to their destinations, for one staged half: `dst`
// and `weight` are lane l's row first + l (from push_destinations, combine.cuh); lane l copies chunk l % 16 of rows
// first + l / 16, first + l / 16 + 2, ..., taking each row's destination from its lane by shuffle, so a warp
// instruction writes two whole 256-byte row pieces and no load waits on another.
template <class Tiles>
__device__ __forceinline__ void store_staged_half_rows(const Sm90MoeParams& p, const uint8_t* staging, int row0,
                                                       int first, uint4* dst, float weight, int col) {
  const int lane = threadIdx.x & 31;
  const int chunk = lane & 15;
  const unsigned long long dst_bits = reinterpret_cast<unsigned long long>(dst);
#pragma unroll 4
  for (int it = 0; it < 16; ++it) {
    const int r = 2 * it + (lane >> 4);  // row within the 32, and the lane that holds its destination
    uint4* row_dst = reinterpret_cast<uint4*>(__shfl_sync(0xFFFFFFFFu, dst_bits, r));
    const float row_weight = __shfl_sync(0xFFFFFFFFu, weight, r);
    if (row_dst == nullptr || col >= p.hidden) continue;  // padding; or the last column block reaching past H
    uint4 value = load_staged_chunk<Tiles>(staging, row0 + first + r, chunk);
    if (p.fuse_top1) value = weighted_top1(value, row_weight);
    row_dst[col / 8] = value;
  }
}

// Lane 0: warpgroup `consumer_wg`'s staged h rows of gate/up task t (64 rows x 128 columns, two TMA boxes) into the
// ring, as store_h_tma does for the consumers. The staging is free again once the TMA has read it (`drained`); the
// task may be signalled once the rows are written (`stores_done`, after complete_tma_stores).
template <class Tiles>
__device__ __forceinline__ void store_h_rows(const Sm90MoeParams& p, const ScheduleView& v, SharedStorage<Tiles>& s,
                                             const Task& t, int consumer_wg, uint32_t task_slot) {
  if ((threadIdx.x & 31) != 0) return;
  const long long ring_row = task_ring_row0(p, v, t, Tiles::kBlockM) + 64 * consumer_wg;
  issue_staged_boxes<Tiles>(&p.tmap_h_store, s.staging, consumer_wg, t.nblock * Tiles::kHalfN, p.intermediate,
                            static_cast<int>(ring_row));
  bulk_wait_group_read_all();
  mbar_arrive(&s.drained[consumer_wg]);
  complete_tma_stores();
  mbar_arrive(&s.stores_done[task_slot]);
}

// One store warp (32 lanes) for consumer warpgroup `consumer_wg`, until the stop task. The destinations of its 64
// rows are looked up once per task, before the rows are staged (while the consumers still run the mainloop).
template <class Tiles>
__device__ __forceinline__ void run_store_warp(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const ScheduleView& v,
                                               int consumer_wg) {
  const int lane = threadIdx.x & 31;
  const int row0 = 64 * consumer_wg;
  TaskQueueCursor<Tiles::kTaskQueue> queue;
  uint32_t uses = 0;
  while (true) {
    // A failed wait means an error was recorded: every other wait fails fast from now on, so just stop.
    if (!warp_wait(p, &s.task_full[queue.slot], queue.parity, kCtrMbarTaskFull, static_cast<int>(queue.slot))) return;
    // Our arrival on task_empty: a down task's slot stays ours anyway, as the signal warp frees it only after
    // our stores_done arrival.
    uint32_t task_slot;
    const Task t = queue.take(s, task_slot);
    if (t.kind == kTaskStop) return;
    if (t.kind == kTaskGateUp && h_stored_by_store_warps(p)) {
      if (!warp_wait(p, &s.staged[consumer_wg], uses & 1u, kCtrMbarStaged, consumer_wg)) return;
      store_h_rows<Tiles>(p, v, s, t, consumer_wg, task_slot);
      __syncwarp();
      ++uses;
      continue;
    }
    if (t.kind != kTaskDown) continue;
    // Each lane owns its two rows, so each lane counts them.
    const int rows[2] = {row0 + lane, row0 + 32 + lane};
    uint4* dst[2];
    float weight[2];
    push_destinations<Tiles>(p, t, rows, true, s.push_count[task_slot], dst, weight);
    {  // the second half only (down_epilogue_staged: the consumers push the first)
      if (!warp_wait(p, &s.staged[consumer_wg], uses & 1u, kCtrMbarStaged, consumer_wg)) return;
      const int col = t.nblock * Tiles::kBlockN + Tiles::kHalfN + (lane & 15) * 8;
      store_staged_half_rows<Tiles>(p, s.staging, row0, 0, dst[0], weight[0], col);
      store_staged_half_rows<Tiles>(p, s.staging, row0, 32, dst[1], weight[1], col);
      __syncwarp();  // every lane's staging reads are done (their values went to the stores)
      if (lane == 0) mbar_arrive(&s.drained[consumer_wg]);
      ++uses;
    }
    // Every lane's stores were issued before the __syncwarp above: lane 0's arrival releases them (CTA scope);
    // the signal warp's gpu-scope fence then publishes them with the task's counters.
    if (lane == 0) mbar_arrive(&s.stores_done[task_slot]);
  }
}

}  // namespace mok::sm90
