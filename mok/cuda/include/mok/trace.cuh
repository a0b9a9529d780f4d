// The task timeline (optional, Sm90MoeParams::trace): when each task was claimed, had its dependencies, reached the
// consumers and was signalled, per ticket, in %globaltimer nanoseconds; experiments/task_timeline.py reads it.
//
// Who writes what: the producer thread claims (kTraceClaimed, kTraceWho) and waits for the dependencies
// (kTraceReady); consumer thread 0 takes the task from the queue (kTraceStart); whoever signals the task writes
// kTraceDone just before the counters move (the signal warp, after the store warps for a down task; else consumer
// thread 0; the simple variant's thread 0). Each mark is one store right where its time is read, so nothing stays
// live across a wait (the producer has 56 registers). Stop tickets are not recorded.
#pragma once

#include <cstdint>

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
  kTraceFields = 5,
};
static_assert(kTraceFields == kSm90TraceFields, "launch.cuh's field count is the host's view of this layout");

__device__ __forceinline__ bool traced(const Sm90MoeParams& p, int ticket) {
  return p.trace != nullptr && ticket >= 0 && ticket < p.trace_tickets;
}

__device__ __forceinline__ void trace_mark(const Sm90MoeParams& p, int ticket, TraceField field) {
  if (!traced(p, ticket)) return;
  p.trace[static_cast<long long>(ticket) * kTraceFields + field] = static_cast<long long>(globaltimer_ns());
}

// The claim, and which CTA runs which kind of task.
__device__ __forceinline__ void trace_claim(const Sm90MoeParams& p, const Task& t) {
  if (!traced(p, t.ticket)) return;
  long long* row = p.trace + static_cast<long long>(t.ticket) * kTraceFields;
  row[kTraceClaimed] = static_cast<long long>(globaltimer_ns());
  row[kTraceWho] = (static_cast<long long>(blockIdx.x) << 8) | t.kind;
}

}  // namespace mok::sm90
