// The task timeline (optional, Sm90MoeParams::trace): when each task was claimed, had its dependencies, reached the
// consumers, had its first K block in shared memory, finished its mainloop and was signalled, per ticket, in
// %globaltimer nanoseconds; experiments/task_timeline.py reads it.
//
// Who writes what: the producer thread claims (kTraceClaimed, kTraceWho) and waits for the dependencies
// (kTraceReady); consumer thread 0 takes the task from the queue (kTraceStart); whoever signals the task writes
// kTraceDone just before the counters move (the signal warp, after the store warps for a down task; else consumer
// thread 0; the simple variant's thread 0). For GEMM tasks consumer thread 0 (consumer warpgroup 0, which always
// multiplies) also marks when the first K block landed (kTraceDataIn) and when its accumulators were complete
// (kTraceMainloopDone): start -> data in is waiting for loads, data in -> mainloop done the wgmma (and any wait for
// a later K block), and the rest the epilogue and the hand-off. Dispatch and combine tasks leave those two at -1. A
// down task of several column blocks (Sm90MoeParams::down_span) writes both marks once per block, so its row keeps
// the last block's: the earlier blocks' mainloops and pushes then count as waiting for loads. With the ping-pong down
// task (run_down_task) both marks are warpgroup 0's: its data-in mark comes after its turn began (so the wait for
// warpgroup 1's turn counts as waiting for loads), and warpgroup 1's turn on the last block falls in the rest.
// Each mark is one store right where its time is read, so nothing stays live across a wait (the producer has 64
// registers). Stop tickets are not recorded.
#pragma once

#include <cstdint>

#include "gemm_mainloop.cuh"
#include "launch.cuh"
#include "sync.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

enum TraceField : int {
  kTraceClaimed = 0,  // the ticket came back from the counter (and decoded to a task)
  kTraceReady = 1,    // its dependencies were met: the producer can load or queue it
  kTraceStart = 2,    // the consumers took it from the task queue (simple variant: the task-published barrier)
  kTraceDone = 3,     // its writes are complete and it is about to be signalled
  kTraceWho = 4,      // blockIdx.x << 8 | TaskKind
  kTraceDataIn = 5,        // GEMM tasks: the first K block is in shared memory (consumer thread 0 saw it land)
  kTraceMainloopDone = 6,  // GEMM tasks: consumer warpgroup 0's accumulators are complete (the epilogue starts)
  kTraceFields = 7,
};
static_assert(kTraceFields == kSm90TraceFields, "launch.cuh's field count is the host's view of this layout");

__device__ __forceinline__ bool traced(const Sm90MoeParams& p, int ticket) {
  return p.trace != nullptr && ticket >= 0 && ticket < p.trace_tickets;
}

__device__ __forceinline__ void trace_mark(const Sm90MoeParams& p, int ticket, TraceField field) {
  if (!traced(p, ticket)) return;
  p.trace[static_cast<long long>(ticket) * kTraceFields + field] = static_cast<long long>(globaltimer_ns());
}

// Consumer thread 0, before a GEMM task's mainloop: wait for the first K block itself (a second wait for the same
// phase, which the mainloop's own wait then passes at once) and mark when it landed. Only when tracing.
template <class Tiles>
__device__ __forceinline__ void trace_first_kblock(const Sm90MoeParams& p, SharedStorage<Tiles>& s,
                                                   const PipeState<Tiles>& pipe, int ticket) {
  if (threadIdx.x != 128 || !traced(p, ticket)) return;
  mbar_wait(p, &s.full[pipe.stage], pipe.phase, kCtrMbarFull, static_cast<int>(pipe.stage));
  trace_mark(p, ticket, kTraceDataIn);
}

// Which CTA runs which kind of task: this one.
__device__ __forceinline__ void trace_who(const Sm90MoeParams& p, const Task& t) {
  if (!traced(p, t.ticket)) return;
  p.trace[static_cast<long long>(t.ticket) * kTraceFields + kTraceWho] =
      (static_cast<long long>(blockIdx.x) << 8) | t.kind;
}

// The claim, and which CTA runs which kind of task (with clusters the pair scheduler claims for both CTAs, and the
// producer that takes the task marks it again: cluster_pairs.cuh).
__device__ __forceinline__ void trace_claim(const Sm90MoeParams& p, const Task& t) {
  if (!traced(p, t.ticket)) return;
  p.trace[static_cast<long long>(t.ticket) * kTraceFields + kTraceClaimed] = static_cast<long long>(globaltimer_ns());
  trace_who(p, t);
}

}  // namespace mok::sm90
