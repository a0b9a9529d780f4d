// Clusters of two CTAs (p.clusters, MOK_CUDA_CLUSTERS): a pair of gate/up row tiles that read the same weight tile
// loads it once. Each CTA lands its own A rows and one half of B (gate rows on CTA 0, up rows on CTA 1) by a TMA
// multicast into both CTAs' stages, so L2 serves each weight K block once per pair instead of twice: about a third of
// a gate/up stage's bytes (mok/cuda/ROUNDS.md: in the bare mainloop held at the power limit, 5.5-6.5% more TFLOP/s at
// the gate/up GEMM's K, through a higher clock at the same power; round 42). Measured in the kernel (round 43): 14.2 GB
// less L2 traffic at anchor-5 and a 3-4% higher clock at the power limit, but as much less work per clock (pairs run
// their K blocks in lock step, and the chip stays in step): 0.986-1.008x the time. Off by default.
//
// Who runs what. One idle producer thread of the cluster's first CTA, the pair scheduler (pair_scheduler_thread),
// claims tickets two at a time, (2i, 2i + 1), from the launch's ticket counter, and decodes both (task_admission.cuh).
// The task order pads every group to an even number of tickets (ScheduleView::pair_units), so such a unit never
// straddles two groups, and in a G group it is two row tiles of one column block (gate_up_band_entry). If the two
// tiles belong to one expert, the unit is a pair: one half posted to each CTA. Otherwise each task is posted alone to
// whichever CTA asks first. A CTA's producer asks for its next task by handing its one-task inbox back (so tickets
// are claimed just in time, as by a CTA alone), waits for the task's dependencies itself (so one CTA's wait does not
// hold the other's tasks), and from there on runs it as without clusters: the consumers, the signal warp and the
// store warps do not know about pairs, except that they pass the stages a pair's half skips (below).
//
// Stages. A multicast lands at the same shared-memory offset in both CTAs, so both halves of a pair must start at the
// same stage of their rings. Alone-posted tasks move the two rings apart (a down task takes I/64 stages, a dispatch
// none), so the scheduler, which knows how many stages every task it posted takes, has the CTA that is behind pass
// 0-2 stages unused (Task::cluster, stages_to_pass) before the pair. Per K block of a pair, each producer waits for its
// own stage to be free (its consumers released it), tells the partner so (an arrival on the partner's peer_free), and
// waits for the partner's word before its multicast writes into the partner's stage. The consumers' releases stay
// local, as without clusters.
//
// No deadlock. The scheduler claims tickets in increasing order and posts each CTA's tasks in that order, and every
// dependency points at a smaller ticket (scheduler.cuh). The smallest unfinished ticket is then the first unfinished
// task of its CTA (and of both, for a pair): every task before it in either CTA has a smaller ticket and finished, so
// its producer is not blocked behind them, and its dependencies are met. The scheduler itself may block only on a
// full inbox, whose tasks are older than the unit it holds.
#pragma once

#include <cstdint>

#include "gemm_mainloop.cuh"
#include "scheduler.cuh"
#include "sync.cuh"
#include "task_admission.cuh"
#include "tma.cuh"
#include "workspace.cuh"

namespace mok::sm90 {

// The pair scheduler's thread: lane 0 of producer warp 2 when the store warps are off (down_tma: the warp is idle),
// else lane 1 of warp 1, beside the signal thread (lane 0), whose waits then share the warp's issue with it.
constexpr int kPairSchedulerThreadAlone = 64;
constexpr int kPairSchedulerThreadBesideSignal = 33;
__device__ __forceinline__ int pair_scheduler_thread(const Sm90MoeParams& p) {
  return p.store_warps ? kPairSchedulerThreadBesideSignal : kPairSchedulerThreadAlone;
}
constexpr uint16_t kBothCtas = 0x3;       // multicast mask: CTAs 0 and 1 of the cluster

// Stages of the ring a task takes (what its producer loads and its consumers release).
template <class Tiles>
__device__ __forceinline__ int task_stages(const Sm90MoeParams& p, const Task& t) {
  if (t.kind == kTaskGateUp) return p.hidden / Tiles::kBlockK + stages_to_pass(t);
  if (t.kind == kTaskDown) return p.down_span * (p.intermediate / Tiles::kBlockK);
  return 0;
}

// Whether tickets (2i, 2i + 1) decoded to two row tiles of one expert and one gate/up column block.
__device__ __forceinline__ bool is_pair(const Task& a, const Task& b) {
  return a.kind == kTaskGateUp && b.kind == kTaskGateUp && a.rank == b.rank && a.nblock == b.nblock &&
         a.expert == b.expert && a.tile + 1 == b.tile;
}

// The scheduler's view of one CTA's inbox: the phase parity of its next post, and where that CTA's stage ring will be
// once it has run every task posted to it so far (mod kStages).
struct InboxCursor {
  uint32_t parity = 0;
  int stage = 0;
};

template <class Tiles>
__device__ __forceinline__ bool inbox_has_room(SharedStorage<Tiles>& s, int cta, const InboxCursor& q) {
  // A fresh barrier sits in phase 0, so the first post (parity ^ 1) finds the inbox free.
  return mbar_test_wait_cluster(&s.inbox_empty[cta], q.parity ^ 1u);
}

// Writes task t into CTA `cta`'s inbox and publishes it (release at cluster scope); then moves the cursor. The caller
// has seen the inbox free.
template <class Tiles>
__device__ __forceinline__ void post_task(const Sm90MoeParams& p, SharedStorage<Tiles>& s, int cta, InboxCursor& q,
                                          const Task& t) {
  static_assert(sizeof(Task) == 9 * sizeof(int), "post_task writes every field of Task");
  const uint32_t dst = cluster_map_shared(&s.inbox, static_cast<uint32_t>(cta));
  st_shared_cluster(dst + 0, t.kind);
  st_shared_cluster(dst + 4, t.rank);
  st_shared_cluster(dst + 8, t.minibatch);
  st_shared_cluster(dst + 12, t.tile);
  st_shared_cluster(dst + 16, t.nblock);
  st_shared_cluster(dst + 20, t.expert);
  st_shared_cluster(dst + 24, t.ticket);
  st_shared_cluster(dst + 28, t.padding_half);
  st_shared_cluster(dst + 32, t.cluster);
  mbar_arrive_release_cluster(cluster_map_shared(&s.inbox_full, static_cast<uint32_t>(cta)));
  q.stage = (q.stage + task_stages<Tiles>(p, t)) & (Tiles::kStages - 1);
  q.parity ^= 1u;
}

// Bounded wait until CTA `cta`'s inbox is free (false: an error was recorded).
template <class Tiles>
__device__ __forceinline__ bool wait_inbox_room(const Sm90MoeParams& p, SharedStorage<Tiles>& s, int cta,
                                                const InboxCursor& q) {
  if (inbox_has_room<Tiles>(s, cta, q)) return true;
  return mbar_wait_cluster(p, &s.inbox_empty[cta], q.parity ^ 1u, kCtrMbarInboxEmpty, cta);
}

// A task alone: to the CTA whose inbox has room, trying `prefer` first; the other one is preferred next time.
template <class Tiles>
__device__ __forceinline__ bool post_alone(const Sm90MoeParams& p, SharedStorage<Tiles>& s, InboxCursor& q0,
                                           InboxCursor& q1, int& prefer, const Task& t) {
  const uint64_t start = globaltimer_ns();
  for (uint32_t spin = 0;; ++spin) {
    const bool room0 = inbox_has_room<Tiles>(s, 0, q0);
    const bool room1 = inbox_has_room<Tiles>(s, 1, q1);
    if (room0 && (prefer == 0 || !room1)) {
      post_task<Tiles>(p, s, 0, q0, t);
      prefer = 1;
      return true;
    }
    if (room1) {
      post_task<Tiles>(p, s, 1, q1, t);
      prefer = 0;
      return true;
    }
    if ((spin & 63) == 63) {
      if (error_raised(p)) return false;
      if (globaltimer_ns() - start > p.timeout_ns) {
        record_error(p, kErrTimeout, kCtrMbarInboxEmpty, -1, -1, static_cast<int>(q0.parity), -1, t.ticket);
        return false;
      }
    }
  }
}

// Both halves of a pair, after the CTA whose ring is behind was told to pass the stages between the two positions
// (at most kStages / 2: whichever CTA is fewer stages behind catches up).
template <class Tiles>
__device__ __forceinline__ bool post_pair(const Sm90MoeParams& p, SharedStorage<Tiles>& s, InboxCursor& q0,
                                          InboxCursor& q1, Task a, Task b) {
  static_assert((Tiles::kStages & (Tiles::kStages - 1)) == 0, "stage positions are taken mod kStages by a mask");
  if (!wait_inbox_room<Tiles>(p, s, 0, q0) || !wait_inbox_room<Tiles>(p, s, 1, q1)) return false;
  const int ahead = (q0.stage - q1.stage) & (Tiles::kStages - 1);  // CTA 0's ring ahead of CTA 1's by this much
  const int pass1 = ahead <= Tiles::kStages / 2 ? ahead : 0;
  const int pass0 = ahead <= Tiles::kStages / 2 ? 0 : Tiles::kStages - ahead;
  a.cluster = 1 | (pass0 << 1);
  b.cluster = 1 | (pass1 << 1);
  post_task<Tiles>(p, s, 0, q0, a);
  post_task<Tiles>(p, s, 1, q1, b);
  return true;
}

// The pair scheduler (one thread of the cluster's CTA 0): until the order ends or an error is recorded.
template <class Tiles>
__device__ __forceinline__ void run_pair_scheduler(const Sm90MoeParams& p, SharedStorage<Tiles>& s,
                                                   const ScheduleView& v) {
  TaskCursor cursor;
  cursor.start(v);
  InboxCursor q0, q1;
  int prefer = 0;
  while (true) {
    const int ticket = atomic_add_relaxed_gpu(p.counters + p.ctr.ticket, 2);
    const Task a = decode_ticket<Tiles>(p, v, cursor, ticket);
    if (a.kind == kTaskStop) break;
    const Task b = decode_ticket<Tiles>(p, v, cursor, ticket + 1);
    bool posted;
    if (is_pair(a, b)) {
      posted = post_pair<Tiles>(p, s, q0, q1, a, b);
    } else {
      posted = a.kind == kTaskIdle || post_alone<Tiles>(p, s, q0, q1, prefer, a);
      if (posted && b.kind == kTaskStop) break;
      posted = posted && (b.kind == kTaskIdle || post_alone<Tiles>(p, s, q0, q1, prefer, b));
    }
    if (!posted) return;  // an error: the producers' waits see it and stop
  }
  // The end (or an error found while decoding): a stop to each CTA, after everything posted before it.
  Task stop{};
  stop.kind = kTaskStop;
  if (wait_inbox_room<Tiles>(p, s, 0, q0)) post_task<Tiles>(p, s, 0, q0, stop);
  if (wait_inbox_room<Tiles>(p, s, 1, q1)) post_task<Tiles>(p, s, 1, q1, stop);
}

// A CTA's producer, reading its inbox: the phase parity of the next post, and whether it holds a task it has not
// handed back yet.
struct InboxReader {
  uint32_t parity = 0;
  bool holds_task = false;
};

// A CTA's producer thread: its next posted task, admitted (dependencies met), or kTaskStop (the end, or an error).
// The inbox is handed back only now, when the producer asks for the next task: the scheduler claims a CTA's tickets
// just in time, as a CTA alone does (round 43: posting as soon as the inbox was read put every CTA's next task in its
// inbox a whole task early, and the whole chip ran each step's dispatch copies at once).
template <class Tiles>
__device__ __forceinline__ Task take_posted_task(const Sm90MoeParams& p, SharedStorage<Tiles>& s, const ScheduleView& v,
                                                 InboxReader& inbox) {
  // Release at cluster scope: the inbox's last read is done before the scheduler writes it again.
  if (inbox.holds_task) mbar_arrive_release_cluster(cluster_map_shared(&s.inbox_empty[cluster_cta_rank()], 0));
  Task t{};
  t.kind = kTaskStop;
  if (mbar_wait_cluster(p, &s.inbox_full, inbox.parity, kCtrMbarInboxFull, 0)) t = s.inbox;
  inbox.parity ^= 1u;
  inbox.holds_task = true;
  if (t.kind == kTaskStop) return t;
  trace_who(p, t);
  if (!wait_task_dependencies<Tiles>(p, v, t)) t.kind = kTaskStop;
  return t;
}

// The producer's share of one half of a pair (one thread): the stages to pass, then per K block this CTA's A rows and
// its half of B (CTA 0: the gate rows, CTA 1: the up rows) multicast to both CTAs. `full` expects the whole stage, A
// and both halves of B: the partner's half may land before this thread's arrive_expect_tx, which is allowed (the
// phase cannot complete before this thread's arrival).
template <class Tiles>
__device__ __forceinline__ void produce_pair_half(const Sm90MoeParams& p, SharedStorage<Tiles>& s,
                                                  PipeState<Tiles>& pipe, const TileLoad& load, const Task& t) {
  for (int i = 0; i < stages_to_pass(t); ++i) {  // a stage the consumers pass (pass_stages): no bytes, one arrival
    mbar_wait(p, &s.empty[pipe.stage], pipe.phase ^ 1u, kCtrMbarEmpty, static_cast<int>(pipe.stage));
    mbar_arrive(&s.full[pipe.stage]);
    pipe.advance();
  }
  const uint32_t cta = cluster_cta_rank();
  const CUtensorMap* b_map = cta == 0 ? load.b_map0 : load.b_map1;
  const int b_row = cta == 0 ? load.b_row0 : load.b_row1;
  for (int kb = 0; kb < load.num_kblocks; ++kb) {
    const uint32_t stage = pipe.stage;
    mbar_wait(p, &s.empty[stage], pipe.phase ^ 1u, kCtrMbarEmpty, static_cast<int>(stage));
    mbar_arrive_remote(cluster_map_shared(&s.peer_free[stage], cta ^ 1u));  // my stage is free for your half
    const uint32_t peer_parity = s.peer_parity;
    mbar_wait(p, &s.peer_free[stage], (peer_parity >> stage) & 1u, kCtrMbarPeerFree, static_cast<int>(stage));
    s.peer_parity = peer_parity ^ (1u << stage);
    mbar_arrive_expect_tx(&s.full[stage], Tiles::kStageTxBytes);
    const int k0 = kb * Tiles::kBlockK;
    tma_load_2d(s.a[stage], load.a_map, &s.full[stage], k0, load.a_row);
    tma_load_2d_multicast(s.b[stage] + cta * (Tiles::kStageBytesB / 2), b_map, &s.full[stage], k0, b_row, kBothCtas);
    pipe.advance();
  }
}

}  // namespace mok::sm90
