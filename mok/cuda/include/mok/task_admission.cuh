// Task admission: a ticket becomes a task (decoded, its expert looked up), and the task is admitted once its
// dependencies are met. One thread does both in a CTA of its own (claim_task, the producer thread); with clusters the
// pair scheduler decodes the tickets of both CTAs and each CTA's producer waits for its own tasks' dependencies
// (cluster_pairs.cuh).
#pragma once

#include "scheduler.cuh"
#include "sync.cuh"
#include "trace.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

__device__ __forceinline__ bool is_gemm_task(const Task& t) {
  return t.kind == kTaskGateUp || t.kind == kTaskDown;
}

// Whether a task's writes are read by TMA (the async proxy) later in the launch: ring x rows (dispatch) and ring h
// rows (gate/up). Pushes, sums and saved rows are read with generic loads or after the launch, so they need no
// proxy fence. (Since round 20 bf16 h leaves by TMA store, so only MXFP8's gate/up rows need it; round 21 timed the
// narrower rule at 0.994-1.001x the kernel time, so the fence stays for bf16 too: mok/cuda/ROUNDS.md, "Round 21".)
__device__ __forceinline__ bool writes_feed_tma(const Task& t) {
  return t.kind == kTaskDispatch || t.kind == kTaskGateUp;
}

// Ticket -> task: decoded in the static order (scheduler.cuh), recorded in the timeline, a GEMM task's global expert
// looked up. kTaskStop at the end of the order or on an error (recorded here, or already by another thread);
// kTaskIdle (clusters' padding tickets) as it is.
template <class Tiles>
__device__ __forceinline__ Task decode_ticket(const Sm90MoeParams& p, const ScheduleView& v, TaskCursor& cursor,
                                              int ticket) {
  Task t = cursor.decode(v, ticket);
  if (t.kind == kTaskStop || t.kind == kTaskIdle) return t;
  trace_claim(p, t);
  if (error_raised(p)) {
    t.kind = kTaskStop;
    return t;
  }
  if (is_gemm_task(t)) {
    const int local = p.tile_expert[static_cast<long long>(t.rank) * p.tiles_per_rank + t.tile];
    if (local < 0 || local >= p.num_local_experts) {
      record_error(p, kErrBadSchedule, kCtrNone, t.rank, t.tile, local, p.num_local_experts, ticket);
      t.kind = kTaskStop;
      return t;
    }
    t.expert = own_slot(p, t.rank) * p.num_local_experts + local;
  }
  return t;
}

// Wait until task t's dependencies are met (false: an error was recorded, by this wait or another thread).
template <class Tiles>
__device__ __forceinline__ bool wait_task_dependencies(const Sm90MoeParams& p, const ScheduleView& v, const Task& t) {
  // A combine-only launch (one real rank, after a barrier behind every GPU's expert launch) waits for nothing:
  // the pushes came from other launches, on other GPUs, which this launch's counters never saw.
  const int pushed_expected = (p.phases & kPhaseExperts) ? p.tokens_per_rank * p.top_k * p.down_nblocks : 0;
  // An early-combine block waits in the consumers instead (wait_combine_ready), and an ablated one not at all.
  const bool waits_here = !(t.kind == kTaskCombine && (t.minibatch >= 0 || (p.ablate & kAblateCombine)));
  Dependency deps[2];
  const int n = waits_here ? task_dependencies(v, p.ctr, t, pushed_expected, deps) : 0;
  // NOTE: unrolled with a guard so that `deps` is indexed by constants and stays in registers.
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (i >= n) break;
    if (!wait_counter_geq(p, p.counters + deps[i].offset, deps[i].expected, deps[i].counter_id, deps[i].rank,
                          deps[i].index, t.ticket)) {
      return false;
    }
  }
  trace_mark(p, t.ticket, kTraceReady);
  // The data behind these counters is read next by TMA (async proxy) or, after a CTA-scope hand-off, by
  // generic loads of the other threads.
  fence_proxy_async_global();
  return true;
}

// One thread of a CTA of its own: ticket -> task -> dependencies satisfied (or kTaskStop on error/end).
template <class Tiles>
__device__ __forceinline__ Task claim_task(const Sm90MoeParams& p, const ScheduleView& v, TaskCursor& cursor) {
  const int ticket = atomic_add_relaxed_gpu(p.counters + p.ctr.ticket, 1);
  Task t = decode_ticket<Tiles>(p, v, cursor, ticket);
  if (t.kind != kTaskStop && !wait_task_dependencies<Tiles>(p, v, t)) t.kind = kTaskStop;
  return t;
}

// Task::padding_half of a claimed GEMM task. A segment's padding rows trail its real rows, so row 64 being padding
// means rows 64..127 all are: the second consumer warpgroup's wgmma would multiply zeros.
// The pipelined producer sets it just before it queues the task (the simple variant never skips).
// NOTE: not in claim_task: a value live across the producer's waits spills (56 registers); the queue's other task
// hides the load's latency from the consumers.
template <class Tiles>
__device__ __forceinline__ void mark_padding_half(const Sm90MoeParams& p, Task& t) {
  static_assert(Tiles::kBlockM == 128 && Tiles::kNumConsumerWG == 2, "one half of the tile per consumer warpgroup");
  if (!p.skip_padding_half || !is_gemm_task(t)) return;
  const long long upper_row = table_row0<Tiles>(p, t) + 64;
  t.padding_half = p.src_rank[upper_row] < 0 ? 1 : 0;
}

}  // namespace mok::sm90
