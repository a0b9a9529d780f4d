// The SM90 MoE forward megakernel: one persistent CTA per SM runs dispatch, the gate/up GEMM with SwiGLU,
// the down GEMM with push-combine, and the weighted sum, for every emulated rank, in one launch (or, with
// `local_rank` >= 0, one real rank's expert tasks or its combine: workspace.cuh, RankPhases).
//
// CTA = 3 warpgroups (384 threads):
//   warpgroup 0 (producer, 56 registers; 64 in the ping-pong instantiation, RegisterSplit): thread 0 takes
//       tickets, decodes tasks (scheduler.cuh), waits for their dependencies, and issues the TMA loads of GEMM
//       tiles (gemm_mainloop.cuh); in gather mode all 128 threads copy the gate/up A rows.
//   In 2-CTA clusters (kClusters, its own instantiation; cluster_pairs.cuh) thread 0 takes its tasks from a pair
//       scheduler in an idle producer thread of the cluster's first CTA, and loads half of a pair's weight tiles for
//       both CTAs.
//   warpgroups 1-2 (consumers, 224 registers; 216 with ping-pong): wgmma on 64 rows each, the epilogues
//       (swiglu_epilogue.cuh, combine.cuh), and the memory-bound tasks (dispatch.cuh, combine.cuh) with all 256
//       threads.
//
// Dispatch modes (runtime, Sm90MoeParams::gather_x): "ring" runs dispatch tasks that copy token rows into the
// ring, read by TMA; "gather" has the producer warpgroup copy the rows of each gate/up tile straight from the
// token buffers into the stage (cp.async), with no dispatch tasks and no ring x.
//
// Two variants share every piece above and differ only in how the roles meet:
//   kPipelined = false ("simple"): lock-step. Thread 0 claims a task and waits for it, all 384 threads
//       meet at a barrier, run the task, meet again, and thread 0 signals. wgmma waits for each k-block.
//   kPipelined = true ("pipelined"): the producer runs ahead through a 2-deep task queue in shared memory
//       (mbarriers), so dependency waits and TMA loads of the next tile overlap this tile's epilogue;
//       consumers keep one k-block of wgmma in flight. Finished tasks are signalled by a thread that is not the
//       producer (the producer may be blocked waiting on exactly that signal): in ring mode by warp 1 of the
//       producer warpgroup, idle otherwise (the "signal warp", p.signal_warp), so the consumer warpgroups hand
//       a finished task over through an mbarrier and go on at once; in gather mode, where the whole producer
//       warpgroup copies rows, by consumer thread 0 after a barrier of both consumer warpgroups.
#pragma once

#include <cstdint>

#include "cluster_pairs.cuh"
#include "combine.cuh"
#include "dispatch.cuh"
#include "gemm_mainloop.cuh"
#include "scheduler.cuh"
#include "store_warps.cuh"
#include "swiglu_epilogue.cuh"
#include "sync.cuh"
#include "task_admission.cuh"
#include "tma.cuh"
#include "trace.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

// After every thread of the task published its writes and met at a barrier, and this thread ran
// release_task_writes(): bump the task's counters.
template <class Tiles>
__device__ __forceinline__ void signal_task_done(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                                 int* push_count) {
  Signal signals[2];
  const int n = task_signals(v, p.ctr, t, signals);
  const bool release_reds = (p.ablate & kProbeReleaseReds) != 0;
  for (int i = 0; i < n; ++i) {
    if (release_reds) {
      red_release_gpu_add(p.counters + signals[i].offset, 1);
    } else {
      red_relaxed_gpu_add(p.counters + signals[i].offset, 1);
    }
  }
  if (t.kind == kTaskDown && !p.fuse_top1) {  // fused top-1 pushes nothing: no combine waits on it
    for (int r = 0; r < p.num_ranks; ++r) {
      const int rows = push_count[r];
      if (rows != 0) {
        if (release_reds) {
          red_release_gpu_add(p.counters + p.ctr.pushed + r, rows);
        } else {
          red_relaxed_gpu_add(p.counters + p.ctr.pushed + r, rows);
        }
        push_count[r] = 0;
      }
    }
  }
}

// What the producer loads for column block `nblock` of GEMM task t (a down task spans p.down_span blocks:
// down_block).
template <class Tiles>
__device__ __forceinline__ TileLoad tile_load(const Sm90MoeParams& p, const ScheduleView& v, const Task& t,
                                              int nblock) {
  TileLoad load;
  load.a_row = own_slot(p, t.rank) * p.ring_rows + ring_row_of_tile(v, t.tile, Tiles::kBlockM);
  load.gather_row0 = table_row0<Tiles>(p, t);
  if (t.kind == kTaskGateUp) {
    load.a_map = p.gather_x ? nullptr : &p.tmap_ring_x;
    load.b_map0 = &p.tmap_w_gate;
    load.b_map1 = &p.tmap_w_up;
    load.b_row0 = load.b_row1 = t.expert * p.intermediate + nblock * Tiles::kHalfN;
    load.num_kblocks = p.hidden / Tiles::kBlockK;
  } else {
    load.a_map = &p.tmap_ring_h;
    load.b_map0 = &p.tmap_w_down;
    load.b_map1 = nullptr;
    load.b_row0 = t.expert * p.hidden + nblock * Tiles::kBlockN;
    load.b_row1 = 0;
    load.num_kblocks = p.intermediate / Tiles::kBlockK;
  }
  return load;
}

// Column block `c` (0 <= c < p.down_span) of down task t: Task::nblock counts down tasks within the tile, so the
// task's blocks are nblock * down_span + c.
__device__ __forceinline__ int down_block(const Sm90MoeParams& p, const Task& t, int c) {
  return t.nblock * p.down_span + c;
}

// The producer's share of a GEMM task: its tile's K blocks, once per column block of a down task.
// A down tile of exactly kStages K blocks (I = 256) keeps its A in the stage ring: block c's K block k lands in
// stage (first + c * kStages + k) % kStages, the stage that already holds A's K block k from the task's first
// block, and nothing else writes a stage's A in between. So blocks after the first load B alone: 128 of 192 KB,
// the A re-reads from L2 gone (mok/cuda/ROUNDS.md, round 17).
// With clusters, one half of a pair of gate/up tiles loads its A and half of B for both CTAs (cluster_pairs.cuh).
template <class Tiles, bool kClusters = false>
__device__ __forceinline__ void produce_task(const Sm90MoeParams& p, SharedStorage<Tiles>& s, PipeState<Tiles>& pipe,
                                             const ScheduleView& v, const Task& t, int producer_thread) {
  if (kClusters && is_pair_half(t)) {
    produce_pair_half<Tiles>(p, s, pipe, tile_load<Tiles>(p, v, t, t.nblock), t);
    return;
  }
  if (t.kind != kTaskDown) {
    produce_tile<Tiles>(p, s, pipe, tile_load<Tiles>(p, v, t, t.nblock), t, producer_thread);
    return;
  }
  const bool a_stays = p.intermediate == Tiles::kStages * Tiles::kBlockK;
  for (int c = 0; c < p.down_span; ++c) {
    produce_tile<Tiles>(p, s, pipe, tile_load<Tiles>(p, v, t, down_block(p, t, c)), t, producer_thread,
                        c == 0 || !a_stays);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Consumer side of one task (256 threads; `consumer_thread` in [0, 256)).
// ---------------------------------------------------------------------------------------------------------

// Whether this thread's consumer warpgroup multiplies its 64 rows of a GEMM task: not when they are all padding
// (Task::padding_half, warpgroup 1). It then skips the wgmma (acc stays zero, what zero rows give) but runs the
// epilogue as always, so the ring, the saved rows and the outputs get the same bits, and the other warpgroup has
// the tensor cores alone. Pipelined variant only (the simple one is the plain reference).
// NOTE: the warpgroup is read from %tid.x here (volatile, so not hoisted): a loop-invariant "am I warpgroup 1"
// kept across the task loop cost the consumers a register that the epilogue then spilled.
template <bool kOverlap>
__device__ __forceinline__ bool multiplies(const Task& t) {
  if (!kOverlap || !t.padding_half) return true;
  uint32_t thread;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(thread));
  return thread < 128 * 2;  // producer warpgroup, then consumer warpgroup 0; consumer warpgroup 1 skips
}

// This warpgroup's mainloop over `kblocks` K blocks of a GEMM task: the stages passed without a wgmma when its
// rows are all padding (first: acc is not live yet), then consume_tile over the rest (0 K blocks: acc = 0).
template <class Tiles, bool kOverlap>
__device__ __forceinline__ void task_mainloop(const Sm90MoeParams& p, SharedStorage<Tiles>& s, PipeState<Tiles>& pipe,
                                              const Task& t, int kblocks, int consumer_wg, bool gathered_a,
                                              float (&acc)[128]) {
  const int mma_kblocks = multiplies<kOverlap>(t) ? kblocks : 0;
  trace_first_kblock<Tiles>(p, s, pipe, t.ticket);  // consumer thread 0 (warpgroup 0: it always multiplies)
  pass_stages<Tiles>(p, s, pipe, kblocks - mma_kblocks);
  consume_tile<Tiles, kOverlap>(p, s, pipe, mma_kblocks, consumer_wg, gathered_a, acc);
  if (threadIdx.x == 128) trace_mark(p, t.ticket, kTraceMainloopDone);
}

// A down task: its p.down_span column blocks of the tile, one after the other, each a mainloop and a push. The rows'
// table entries are loaded before the first mainloop and resolved after it (combine.cuh); the destinations serve
// every block, and each row is counted once per block. Wider spans pay the lookups' round trip, and the task's
// hand-off, fence and signal, once per span instead of once per block (the fixed cost that made anchor-2's down
// tasks slow: mok/cuda/ROUNDS.md, round 16). With store warps (pipelined variant, one block per task: the launch
// checks) the consumers push half the rows and the store warps the other half (store_warps.cuh).
// Ping-pong (p.down_ping_pong; pipelined variant, down_tma, no signal warp): the two warpgroups take turns on the
// tensor cores instead of multiplying each block together. Warpgroup w multiplies column half w of every block (all
// 128 rows: consume_column_half), and while one multiplies, the other runs its epilogue, which the tensor cores
// otherwise wait for (a down block at anchor-2: 1.85 us of mainloop, 2.2 us of the rest; mok/cuda/ROUNDS.md, round
// 20). The turns go 0, 1, 0, 1, ... block by block: warpgroup 0 waits until warpgroup 1 has issued the last wgmma of
// its mainloop of the previous block, warpgroup 1 until warpgroup 0 has of the same block (round 22: the turn passes
// once they are issued, not once they completed). Both read every stage, so each stage is released by all
// eight consumer warps as before, and each turn's wait points at a mainloop that does not wait for this warpgroup.
template <class Tiles>
__device__ __forceinline__ void ping_pong_mainloop(const Sm90MoeParams& p, SharedStorage<Tiles>& s,
                                                   PipeState<Tiles>& pipe, const Task& block, int c, int consumer_wg,
                                                   float (&acc)[128]) {
  constexpr uint32_t kTurnThreads = 256;  // one warpgroup arrives, the other waits
  const NamedBarrier mine = consumer_wg == 0 ? NamedBarrier::kDownTurnWG0 : NamedBarrier::kDownTurnWG1;
  const NamedBarrier other = consumer_wg == 0 ? NamedBarrier::kDownTurnWG1 : NamedBarrier::kDownTurnWG0;
  if (consumer_wg == 1 || c > 0) named_barrier_sync(mine, kTurnThreads);
  trace_first_kblock<Tiles>(p, s, pipe, block.ticket);  // consumer thread 0 (warpgroup 0)
  // The turn passes once this warpgroup's last wgmma are issued (consume_column_half). Warpgroup 1's last mainloop of
  // the task hands over nothing: warpgroup 0's next turn is in another task.
  const bool hands_over = consumer_wg == 0 || c + 1 < p.down_span;
  consume_column_half<Tiles>(p, s, pipe, p.intermediate / Tiles::kBlockK, consumer_wg, acc, [&] {
    if (hands_over) named_barrier_arrive(other, kTurnThreads);
  });
  if (threadIdx.x == 128) trace_mark(p, block.ticket, kTraceMainloopDone);
}

template <class Tiles, bool kOverlap, bool kDownPingPong>
__device__ __forceinline__ void run_down_task(const Sm90MoeParams& p, SharedStorage<Tiles>& s, PipeState<Tiles>& pipe,
                                              const Task& t, int consumer_wg, int* push_count,
                                              StagingHandoff& handoff) {
  const RowLookup entries = consumer_row_lookup<Tiles>(p, t, consumer_wg);
  LaneDestination mine{};  // resolved after the first mainloop, kept (3 registers) for the others
  for (int c = 0; c < p.down_span; ++c) {
    Task block = t;
    block.nblock = down_block(p, t, c);
    float acc[128];
    if constexpr (kDownPingPong) {  // only in the instantiation that runs it (the launch: p.down_ping_pong)
      ping_pong_mainloop<Tiles>(p, s, pipe, block, c, consumer_wg, acc);
    } else {
      task_mainloop<Tiles, kOverlap>(p, s, pipe, block, p.intermediate / Tiles::kBlockK, consumer_wg, false, acc);
    }
    if (kOverlap && p.store_warps) {  // compiled out of the simple variant
      down_epilogue_staged<Tiles>(p, block, s, acc, consumer_wg, entries, handoff);
      continue;
    }
    if (c == 0) mine = resolve_lane_destination<Tiles>(p, t, consumer_wg, entries, p.down_span, push_count);
    if (p.down_tma) {  // the rows are counted above; they leave by TMA (combine.cuh)
      if (c == 0 && t.nblock == 0) write_inverse_map_entry<Tiles>(p, t, consumer_wg, entries);
      store_down_block_tma<Tiles, kDownPingPong>(p, block, s, acc, consumer_wg, /*staging_draining=*/c > 0);
      continue;
    }
    uint4* dst_row[8];
    float w_row[8];
    share_destinations<Tiles>(p, t, consumer_wg, mine, dst_row, w_row);
    push_down_block<Tiles>(p, block, s, acc, consumer_wg, dst_row, w_row);
  }
  if (p.down_tma) finish_tma_stores(consumer_wg);
}

template <class Tiles, bool kOverlap, bool kDownPingPong>
__device__ __forceinline__ void run_consumer_task(const Sm90MoeParams& p, SharedStorage<Tiles>& s,
                                                  const ScheduleView& v, const Task& t, PipeState<Tiles>& pipe,
                                                  int consumer_wg, int consumer_thread, int* push_count,
                                                  StagingHandoff& handoff, int& combine_steps_done) {
  constexpr int kConsumerThreads = 128 * Tiles::kNumConsumerWG;
  switch (t.kind) {
    case kTaskDispatch:
      if (p.mxfp8) {
        dispatch_tile_mxfp8<Tiles>(p, v, t, consumer_thread, kConsumerThreads);
      } else {
        dispatch_tile<Tiles>(p, v, t, consumer_thread, kConsumerThreads);
      }
      break;
    case kTaskCombine:
      if (t.minibatch >= 0 && !(p.ablate & kAblateCombine)) {
        wait_combine_ready(p, v, t, consumer_thread, kConsumerThreads, combine_steps_done);
      }
      combine_block<Tiles>(p, s, t, consumer_thread, kConsumerThreads);
      break;
    case kTaskGateUp: {
      float acc[128];
      task_mainloop<Tiles, kOverlap>(p, s, pipe, t, p.hidden / Tiles::kBlockK, consumer_wg, p.gather_x != 0, acc);
      wait_staging_free<Tiles>(p, s, consumer_wg, handoff);  // the store warp has read the last rows handed to it
      const bool h_by_store_warp = h_stored_by_store_warps(p);
      gate_up_epilogue<Tiles>(p, v, t, s, acc, consumer_wg, h_by_store_warp);
      if (h_by_store_warp) hand_staging_to_store_warp<Tiles>(s, consumer_wg, handoff);
      break;
    }
    case kTaskDown:
      run_down_task<Tiles, kOverlap, kDownPingPong>(p, s, pipe, t, consumer_wg, push_count, handoff);
      break;
    default:
      break;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Variant "simple": lock-step task loop.
// ---------------------------------------------------------------------------------------------------------
template <class Tiles>
__device__ __forceinline__ void simple_producer(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const ScheduleView& v) {
  const bool leader = threadIdx.x == 0;
  TaskCursor cursor;
  cursor.start(v);
  PipeState<Tiles> pipe;
  while (true) {
    if (leader) s.tasks[0] = claim_task<Tiles>(p, v, cursor);
    named_barrier_sync(NamedBarrier::kAll, Tiles::kNumThreads);  // task published
    const Task t = s.tasks[0];
    if (t.kind == kTaskStop) break;
    if (leader) trace_mark(p, t.ticket, kTraceStart);
    // Gather mode: the whole producer warpgroup loads (gemm_mainloop.cuh, produce_tile).
    if ((leader || p.gather_x) && is_gemm_task(t)) {
      produce_task<Tiles>(p, s, pipe, v, t, static_cast<int>(threadIdx.x));
    }
    named_barrier_sync(NamedBarrier::kAll, Tiles::kNumThreads);  // task finished, writes published
    if (leader) {
      trace_mark(p, t.ticket, kTraceDone);
      release_task_writes();
      signal_task_done<Tiles>(p, v, t, s.push_count[0]);
    }
  }
}

template <class Tiles>
__device__ __forceinline__ void simple_consumer(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const ScheduleView& v,
                                                int consumer_wg) {
  const int consumer_thread = static_cast<int>(threadIdx.x) - 128;
  PipeState<Tiles> pipe;
  StagingHandoff handoff;  // unused: no store warps in this variant
  int combine_steps_done = 0;
  while (true) {
    named_barrier_sync(NamedBarrier::kAll, Tiles::kNumThreads);  // task published
    const Task t = s.tasks[0];
    if (t.kind == kTaskStop) break;
    run_consumer_task<Tiles, false, false>(p, s, v, t, pipe, consumer_wg, consumer_thread, s.push_count[0],
                                           handoff, combine_steps_done);
    if (writes_feed_tma(t)) publish_writes();
    named_barrier_sync(NamedBarrier::kAll, Tiles::kNumThreads);  // task finished, writes published
  }
}

// ---------------------------------------------------------------------------------------------------------
// Variant "pipelined": producer runs ahead through the task queue.
// ---------------------------------------------------------------------------------------------------------
constexpr int kSignalThread = 32;  // lane 0 of the producer warpgroup's warp 1 (signal warp)
static_assert(kSignalThread / 32 < kFirstStoreWarp, "the signal warp is not a store warp");
static_assert(kPairSchedulerThreadAlone / 32 == kFirstStoreWarp && kPairSchedulerThreadBesideSignal / 32 == 1 &&
                  kPairSchedulerThreadBesideSignal != kSignalThread,
              "the pair scheduler takes a store warp's thread only when the store warps are off");

// The signal warp (one thread): for every task in queue order, once all eight consumer warps arrived on the
// slot's `task_done` (each after its writes and, for dispatch and gate/up, its proxy fence: release at CTA
// scope), run the gpu-scope fence and bump the task's counters, which is the same release pattern as a CTA
// barrier followed by one thread's fence (sync.cuh). Then free the slot (its push counts are zero again) for
// the producer.
template <class Tiles>
__device__ __forceinline__ void signal_finished_tasks(const Sm90MoeParams& p, SharedStorage<Tiles>& s,
                                                      const ScheduleView& v) {
  uint32_t slot = 0, parity = 0;
  uint32_t stores_parity = 0;  // bit i: parity of the next phase of stores_done[i] (a phase per stored task)
  while (true) {
    // A failed wait means an error was recorded: every other wait fails fast from now on, so just stop.
    if (!mbar_wait(p, &s.task_done[slot], parity, kCtrMbarTaskDone, static_cast<int>(slot))) break;
    const Task t = s.tasks[slot];
    if (t.kind == kTaskStop) break;
    if (stored_by_store_warps(p, t)) {  // its rows leave through the store warps (store_warps.cuh)
      const uint32_t stores = (stores_parity >> slot) & 1u;
      if (!mbar_wait(p, &s.stores_done[slot], stores, kCtrMbarStoresDone, static_cast<int>(slot))) break;
      stores_parity ^= 1u << slot;
    }
    trace_mark(p, t.ticket, kTraceDone);
    release_task_writes();
    signal_task_done<Tiles>(p, v, t, s.push_count[slot]);
    mbar_arrive(&s.task_empty[slot]);  // release: the push counts were cleared before the producer reuses the slot
    if (++slot == Tiles::kTaskQueue) {
      slot = 0;
      parity ^= 1u;
    }
  }
}

// Thread 0 claims tasks; in gather mode the other 127 producer threads follow it through a producer-only
// barrier (they read the task thread 0 queued) and copy A rows with it. With clusters (kClusters: ring mode, signal
// warp) thread 0 takes its tasks from the pair scheduler instead, which runs in an idle producer thread of the
// cluster's CTA 0 (pair_scheduler_thread, cluster_pairs.cuh).
template <class Tiles, bool kClusters>
__device__ __forceinline__ void pipelined_producer(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const ScheduleView& v) {
  const bool leader = threadIdx.x == 0;
  if (!leader && !p.gather_x) {  // ring mode: one thread drives the whole role; one more may signal
    const int warp = threadIdx.x / 32;
    if (kClusters && threadIdx.x == pair_scheduler_thread(p) && cluster_cta_rank() == 0) {
      run_pair_scheduler<Tiles>(p, s, v);
    }
    if (p.signal_warp && threadIdx.x == kSignalThread) signal_finished_tasks<Tiles>(p, s, v);
    if (p.store_warps && warp >= kFirstStoreWarp && warp < kFirstStoreWarp + Tiles::kNumConsumerWG) {
      run_store_warp<Tiles>(p, s, v, warp - kFirstStoreWarp);
    }
    return;
  }
  TaskCursor cursor;
  cursor.start(v);
  PipeState<Tiles> pipe;
  uint32_t slot = 0, parity = 0;
  InboxReader inbox;  // clusters only
  while (true) {
    Task t{};
    if (leader) {
      // NOTE: every load of every task already queued was issued before this claim may block on a
      // dependency, so the consumers can always finish the tasks this wait might depend on.
      if constexpr (kClusters) {
        t = take_posted_task<Tiles>(p, s, v, inbox);
      } else {
        t = claim_task<Tiles>(p, v, cursor);
      }
      mbar_wait(p, &s.task_empty[slot], parity ^ 1u, kCtrMbarTaskEmpty, static_cast<int>(slot));
      mark_padding_half<Tiles>(p, t);
      s.tasks[slot] = t;
      mbar_arrive(&s.task_full[slot]);  // release (CTA scope): the task and the acquired dependencies
    }
    if (p.gather_x) {
      // Thread 0 rewrites this slot only two tasks later, after two more of these barriers: every producer
      // thread has read it by then.
      named_barrier_sync(NamedBarrier::kProducers, Tiles::kProducerThreads);
      t = s.tasks[slot];
    }
    if (t.kind == kTaskStop) break;
    if (is_gemm_task(t)) produce_task<Tiles, kClusters>(p, s, pipe, v, t, static_cast<int>(threadIdx.x));
    if (++slot == Tiles::kTaskQueue) {
      slot = 0;
      parity ^= 1u;
    }
  }
}

template <class Tiles, bool kDownPingPong, bool kClusters>
__device__ __forceinline__ void pipelined_consumer(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const ScheduleView& v,
                                                   int consumer_wg) {
  constexpr int kConsumerThreads = 128 * Tiles::kNumConsumerWG;
  const int consumer_thread = static_cast<int>(threadIdx.x) - 128;
  const int lane = threadIdx.x & 31;
  PipeState<Tiles> pipe;
  StagingHandoff handoff;
  TaskQueueCursor<Tiles::kTaskQueue> queue;
  int combine_steps_done = 0;
  while (true) {
    mbar_wait(p, &s.task_full[queue.slot], queue.parity, kCtrMbarTaskFull, static_cast<int>(queue.slot));
    uint32_t task_slot;
    const Task t = queue.take(s, task_slot);
    if (t.kind == kTaskStop) {
      if (p.signal_warp && lane == 0) mbar_arrive(&s.task_done[task_slot]);  // lets the signal warp finish too
      break;
    }
    if (consumer_thread == 0) trace_mark(p, t.ticket, kTraceStart);
    // Push counts live with the task's queue slot: they are cleared by whoever signals the task before the
    // slot can carry a new task (the signal warp frees the slot itself; consumer thread 0 signals before it
    // reaches the barrier at the end of the next task).
    int* push_count = s.push_count[task_slot];
    // Clusters: the stages a pair's half passes unused, to start where its partner does (Task::cluster). (Here, not
    // in task_mainloop: a value more in the consumers' task code spills in the kernels without clusters.)
    if constexpr (kClusters) pass_stages<Tiles>(p, s, pipe, stages_to_pass(t));
    run_consumer_task<Tiles, true, kDownPingPong>(p, s, v, t, pipe, consumer_wg, consumer_thread, push_count,
                                                  handoff, combine_steps_done);
    if (writes_feed_tma(t)) publish_writes();
    if (p.signal_warp) {
      __syncwarp();  // orders the warp's writes before lane 0's arrival (release at CTA scope)
      if (lane == 0) mbar_arrive(&s.task_done[task_slot]);
    } else {
      named_barrier_sync(NamedBarrier::kConsumers, kConsumerThreads);
      if (consumer_thread == 0) {
        trace_mark(p, t.ticket, kTraceDone);
        release_task_writes();
        signal_task_done<Tiles>(p, v, t, push_count);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// The kernel. Four instantiations (csrc/sm90_moe_forward.cu picks one per launch): simple; pipelined; pipelined
// with the ping-pong down task (kDownPingPong), which alone needs the 64/216 register split (RegisterSplit);
// pipelined in 2-CTA clusters (kClusters, cluster_pairs.cuh; launched with a cluster dimension of 2).
// ---------------------------------------------------------------------------------------------------------
template <class Tiles, bool kPipelined, bool kDownPingPong, bool kClusters = false>
__global__ void __launch_bounds__(Tiles::kNumThreads, 1)
    sm90_moe_forward_kernel(const __grid_constant__ Sm90MoeParams params) {
  static_assert(!kClusters || (kPipelined && !kDownPingPong), "clusters run the pipelined variant's plain down task");
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  const Sm90MoeParams& p = params;
  extern __shared__ uint8_t smem_raw[];
  // Align the storage to 1024 bytes (TMA 128B-swizzle destinations and wgmma descriptors need it).
  const uint32_t misalignment = smem_addr(smem_raw) & 1023u;
  SharedStorage<Tiles>& s =
      *reinterpret_cast<SharedStorage<Tiles>*>(smem_raw + ((1024u - misalignment) & 1023u));

  // Prologue: barriers, per-rank tile counts, the number of steps.
  if (threadIdx.x == 0) {
    // `full`: the producer's arrive_expect_tx (+ TMA bytes); in gather mode also one arrival per producer
    // thread (its cp.async rows landed, or, for a TMA-fed stage, thread 0's arrival worth 128).
    const uint32_t full_arrivals = 1u + (p.gather_x ? Tiles::kProducerThreads : 0u);
    for (int i = 0; i < Tiles::kStages; ++i) {
      mbar_init(&s.full[i], full_arrivals);
      mbar_init(&s.empty[i], 4 * Tiles::kNumConsumerWG);  // one arrival per consumer warp
    }
    for (int i = 0; i < Tiles::kTaskQueue; ++i) {
      mbar_init(&s.task_full[i], 1);
      // Consumer warps arrive on `task_empty` once they have read the task; with the signal warp, the slot is
      // free only once that warp has signalled the task too.
      mbar_init(&s.task_empty[i],
                4 * Tiles::kNumConsumerWG + (p.signal_warp ? 1 : 0) + (p.store_warps ? Tiles::kNumConsumerWG : 0));
      mbar_init(&s.task_done[i], 4 * Tiles::kNumConsumerWG);
      mbar_init(&s.stores_done[i], Tiles::kNumConsumerWG);  // one arrival per store warp
    }
    for (int w = 0; w < Tiles::kNumConsumerWG; ++w) {
      mbar_init(&s.staged[w], 4);   // the warpgroup's four warps, each after its own stmatrix
      mbar_init(&s.drained[w], 1);  // the store warp's lane 0
    }
    if constexpr (kClusters) {
      mbar_init(&s.inbox_full, 1);  // the scheduler's post
      for (int c = 0; c < 2; ++c) mbar_init(&s.inbox_empty[c], 1);  // CTA c's producer handed it back
      for (int i = 0; i < Tiles::kStages; ++i) mbar_init(&s.peer_free[i], 1);  // the partner's producer
      s.peer_parity = 0;
    }
    fence_mbarrier_init();
    tma_prefetch_descriptor(&p.tmap_ring_x);
    tma_prefetch_descriptor(&p.tmap_ring_h);
    tma_prefetch_descriptor(&p.tmap_w_gate);
    tma_prefetch_descriptor(&p.tmap_w_up);
    tma_prefetch_descriptor(&p.tmap_w_down);
    tma_prefetch_descriptor(&p.tmap_h_store);
  }
  for (int r = threadIdx.x; r < Tiles::kMaxRanks; r += blockDim.x) {
    for (int q = 0; q < Tiles::kTaskQueue; ++q) s.push_count[q][r] = 0;
    int tiles = 0;
    // A launch of one real rank runs that rank's expert tasks only, and a combine-only launch none.
    const bool runs_experts = (p.phases & kPhaseExperts) && (p.local_rank < 0 || r == p.local_rank);
    if (r < p.num_ranks && runs_experts) {
      const int rows = p.segment_offsets[r * (p.num_local_experts + 1) + p.num_local_experts];
      if (rows < 0 || rows > p.capacity || rows % Tiles::kBlockM != 0) {
        record_error(p, kErrBadSchedule, kCtrNone, r, -1, rows, p.capacity, -1);
      } else {
        tiles = rows / Tiles::kBlockM;
      }
    }
    s.rank_tiles[r] = tiles;
  }
  __syncthreads();
  // Both CTAs' barriers are initialised before either reaches into the other.
  if constexpr (kClusters) cluster_sync_all();
  if (threadIdx.x == 0) {
    int steps = 0;
    for (int r = 0; r < p.num_ranks; ++r) {
      steps = max(steps, (s.rank_tiles[r] + p.tiles_per_minibatch - 1) / p.tiles_per_minibatch);
    }
    // Overlapped steps walk one step more: the last minibatch's down tasks (scheduler.cuh).
    s.num_steps = steps > 0 && p.overlap_steps ? steps + 1 : steps;
  }
  __syncthreads();

  ScheduleView v;
  v.num_ranks = p.num_ranks;
  v.tiles_per_rank = p.tiles_per_rank;
  v.tiles_per_minibatch = p.tiles_per_minibatch;
  v.ring_slots = p.ring_slots;
  v.max_minibatches = p.max_minibatches;
  v.gate_up_nblocks = p.gate_up_nblocks;
  // Down tasks per tile, divided on the host: a quotient computed here is a value the producer (56 registers) must
  // keep or spill, where a kernel parameter can be read again from the constant bank.
  v.down_nblocks = p.down_tasks_per_tile;
  v.combine_blocks = p.combine_blocks;
  v.num_steps = s.num_steps;
  v.rank_tiles = s.rank_tiles;
  v.gather_x = p.gather_x;
  v.combine_rank = p.local_rank;
  v.combine_offsets = p.combine_offsets;
  v.overlap_steps = p.overlap_steps;
  v.spread_dispatch = p.spread_dispatch;
  v.combine_tasks = p.combine_tasks;
  v.first_dispatch_parts = p.first_dispatch_parts;
  v.pair_units = kClusters ? 1 : 0;

  // Roles. NOTE: setmaxnreg needs each warpgroup's role to be one branch of a single if/else.
  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    setmaxnreg_dec<RegisterSplit<kDownPingPong>::kProducer>();
    if constexpr (kPipelined) {
      pipelined_producer<Tiles, kClusters>(p, s, v);
    } else {
      simple_producer<Tiles>(p, s, v);
    }
  } else {
    setmaxnreg_inc<RegisterSplit<kDownPingPong>::kConsumer>();
    if constexpr (kPipelined) {
      pipelined_consumer<Tiles, kDownPingPong, kClusters>(p, s, v, warpgroup - 1);
    } else {
      simple_consumer<Tiles>(p, s, v, warpgroup - 1);
    }
  }
  // Neither CTA leaves while the other may still arrive on its barriers or multicast into its stages.
  if constexpr (kClusters) cluster_sync_all();
#endif
}

// Zeroes the counters and the error record in-stream before every launch (CUDA-graph friendly: no host
// involvement, no memset node needed).
__global__ void sm90_moe_reset_kernel(int* counters, int num_counters, int* error, int num_error_words) {
  const int stride = static_cast<int>(gridDim.x * blockDim.x);
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < num_counters; i += stride) counters[i] = 0;
  for (int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < num_error_words; i += stride) error[i] = 0;
}

}  // namespace mok::sm90
