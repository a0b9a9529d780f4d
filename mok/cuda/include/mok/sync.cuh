// Synchronisation primitives of the megakernel: release/acquire counters in global memory, mbarriers,
// named barriers, proxy fences, and bounded waits that record where they stopped instead of hanging.
//
// Memory-ordering rules used throughout (see README.md, "Memory ordering"):
//  * A task's writes are published by: every thread that wrote data TMA reads later (ring x and ring h rows)
//    `publish_writes()` (fence.proxy.async.global: generic stores -> async-proxy reads), then a CTA-scope
//    synchronisation (a barrier of the consumer warpgroups, or each warp's __syncwarp and an mbarrier arrival
//    that the signal warp waits on), then ONE thread `release_task_writes()` (fence.acq_rel.gpu) and relaxed
//    reds on the task's counters. The synchronisation orders the other threads' writes before that thread's
//    fence, and a release is cumulative, so the gpu-scope fence is needed once, not in every writer (CUTLASS's
//    GenericBarrier does the same). Measured on the H200: a fence in every writer cost 0.2-3% of the kernel
//    (round 7); a red.release per counter adds a MEMBAR each (round 8: within noise).
//  * Rows written by TMA stores (bf16 h, down_tma's y) are published the same way, except that the thread that
//    issued the stores first waits for them (cp.async.bulk.wait_group 0, finish_tma_stores) before the CTA-scope
//    synchronisation: a bulk group is complete, and its writes visible, only to the thread that waits for it.
//  * A dependency is consumed by: one thread `ld.acquire.gpu` until the count is reached, then
//    fence.proxy.async.global (its TMA loads come next), then a CTA barrier or an mbarrier hand-off
//    (release/acquire at CTA scope) to the threads that read the data.
//  * Every spin is bounded by Params::timeout_ns (globaltimer) and gives up early once any thread has
//    recorded an error, so a lost signal ends the kernel with an error record instead of a hang.
//
// NOTE: everything here is inlined, slow paths included. With out-of-line calls in the kernel, ptxas
// ignores setmaxnreg ("C7507 ... ignored to maintain minimum register requirements") and the consumer
// warpgroups stay at 168 registers, which spills the 128-register accumulators.
#pragma once

#include <cstdint>

#include "workspace.cuh"

namespace mok::sm90 {

// ---------------------------------------------------------------------------------------------------------
// Row data read once (token rows by dispatch, y rows by the sum kernel): the read-only path, not kept in L1. Only
// for data written before this launch began.
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint4 load_streaming(const uint4* ptr) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr));
  return v;
}

// The same load, and a store, under an L2 cache policy (`l2_copy_policy`).
__device__ __forceinline__ uint4 load_streaming(const uint4* ptr, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(ptr), "l"(policy));
  return v;
}

__device__ __forceinline__ void store_with_policy(uint4* ptr, uint4 v, uint64_t policy) {
  asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;"
               ::"l"(ptr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy) : "memory");
}

// An L2 policy for a copy's loads and stores: evict-first when the copy runs beside GEMM tasks whose operands the
// L2 should keep (round 44: the spread order's ring copies among the gate/up bands pushed the bands' weights out,
// +8% DRAM reads at anchor-5), else the default priority.
__device__ __forceinline__ uint64_t l2_copy_policy(bool evict_first) {
  uint64_t policy;
  if (evict_first) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  }
  return policy;
}

// ---------------------------------------------------------------------------------------------------------
// Global-memory counters
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ int ld_acquire_gpu(const int* ptr) {
  int value;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
  return value;
}

__device__ __forceinline__ int ld_relaxed_gpu(const int* ptr) {
  int value;
  asm volatile("ld.relaxed.gpu.global.b32 %0, [%1];" : "=r"(value) : "l"(ptr) : "memory");
  return value;
}

// The form before round 8 (each one adds a MEMBAR in SASS); kept for the timing probe kProbeReleaseReds.
__device__ __forceinline__ void red_release_gpu_add(int* ptr, int value) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
}

// Only after release_task_writes() (fence.acq_rel.gpu) by the same thread: the fence and this relaxed red
// together are the release pattern, without the MEMBAR that each red.release adds.
__device__ __forceinline__ void red_relaxed_gpu_add(int* ptr, int value) {
  asm volatile("red.relaxed.gpu.global.add.s32 [%0], %1;" ::"l"(ptr), "r"(value) : "memory");
}

__device__ __forceinline__ int atomic_add_relaxed_gpu(int* ptr, int value) {
  int old;
  asm volatile("atom.relaxed.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(value) : "memory");
  return old;
}

// NOTE: generic-proxy stores that a TMA (async proxy) will read, possibly from another SM, need a proxy
// fence between the store and the release that publishes them; the consumer side fences again after its
// acquire. Both are cheap and the pairing is what the PTX memory model asks for.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;" ::: "memory");
}

__device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

// Called by every thread that wrote data another task will read through TMA, before the synchronisation that
// precedes the single releasing thread (data read with generic loads needs only the release itself).
__device__ __forceinline__ void publish_writes() { fence_proxy_async_global(); }

// Called by the single releasing thread after that barrier, before its red.release on the task's counters:
// makes every write the barrier ordered before it visible at gpu scope.
__device__ __forceinline__ void release_task_writes() { fence_acq_rel_gpu(); }

__device__ __forceinline__ uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---------------------------------------------------------------------------------------------------------
// Error record
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ bool error_raised(const Sm90MoeParams& p) {
  return ld_relaxed_gpu(p.error + kErrWordCode) != kErrNone;
}

__device__ __forceinline__ void record_error(const Sm90MoeParams& p, int code, int counter, int rank, int index,
                                          int seen, int expected, int ticket) {
  if (atomicCAS(p.error + kErrWordCode, kErrNone, code) == kErrNone) {
    p.error[kErrWordCounter] = counter;
    p.error[kErrWordRank] = rank;
    p.error[kErrWordIndex] = index;
    p.error[kErrWordSeen] = seen;
    p.error[kErrWordExpected] = expected;
    p.error[kErrWordBlock] = static_cast<int>(blockIdx.x);
    p.error[kErrWordTicket] = ticket;
    __threadfence();
  }
}

// Spin until *counter >= expected (acquire). Returns false, with an error recorded, on time-out, or at
// once if another thread already recorded one.
__device__ __forceinline__ bool wait_counter_geq(const Sm90MoeParams& p, const int* counter, int expected,
                                              int counter_id, int rank, int index, int ticket) {
  if (ld_acquire_gpu(counter) >= expected) return true;
  const uint64_t start = globaltimer_ns();
  for (uint32_t spin = 0;; ++spin) {
    __nanosleep(64);
    const int seen = ld_acquire_gpu(counter);
    if (seen >= expected) return true;
    if ((spin & 15) == 15) {
      if (error_raised(p)) return false;
      if (globaltimer_ns() - start > p.timeout_ns) {
        record_error(p, kErrTimeout, counter_id, rank, index, seen, expected, ticket);
        return false;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// mbarriers (shared memory)
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* ptr) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrivals) : "memory");
}

// Makes mbarrier initialisation visible to the async proxy (TMA complete_tx) and to the other threads
// (together with the CTA barrier that follows).
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}

// One arrival worth `count` (gather mode: the arrivals of the producer threads that a TMA-fed stage does not
// need, made by the one thread that issues the TMA).
__device__ __forceinline__ void mbar_arrive_count(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

// ---------------------------------------------------------------------------------------------------------
// cp.async (gather mode): 16-byte copies global -> shared through L2, completing on an mbarrier.
// ---------------------------------------------------------------------------------------------------------

// Copies 16 bytes, or writes 16 zero bytes when `src_bytes` is 0 (padding rows; `src` is then not read).
__device__ __forceinline__ void cp_async_16(uint32_t dst_smem, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;" ::"r"(dst_smem), "l"(src), "r"(src_bytes)
               : "memory");
}

// Ask L2 to fetch the line holding `ptr` (no data comes back; the later cp.async then hits L2).
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}

// Asks L2 for `bytes` (a multiple of 16) contiguous bytes from 16-byte aligned `ptr`, without waiting (the bulk
// copy engine fetches them; nothing arrives anywhere).
__device__ __forceinline__ void bulk_prefetch_l2(const void* ptr, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(ptr), "r"(bytes) : "memory");
}

// The mbarrier receives one arrival once every cp.async this thread issued so far has landed. `.noinc`: the
// arrival counts against the barrier's initial count (which includes the producer threads in gather mode).
__device__ __forceinline__ void cp_async_mbar_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
}

// NOTE: cp.async writes shared memory through the generic proxy and wgmma reads it through the async proxy:
// the consumer fences after seeing the stage complete and before its wgmma (TMA-written stages need none).
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// One poll of an mbarrier phase, the body shared by the three polls below: `instr` is the PTX wait (try_wait, which
// may suspend the thread for a while, or test_wait, which returns at once; and its scope), its result a predicate.
// A macro because asm takes a string literal.
#define MOK_MBAR_POLL(instr) "{\n.reg .pred p;\n" instr " p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"

__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(MOK_MBAR_POLL("mbarrier.try_wait.parity.shared::cta.b64")
               : "=r"(done)
               : "r"(smem_addr(bar)), "r"(parity)
               : "memory");
  return done != 0;
}

// The same with acquire at cluster scope: for phases completed by another CTA's release.cluster arrival (clusters).
__device__ __forceinline__ bool mbar_try_wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(MOK_MBAR_POLL("mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64")
               : "=r"(done)
               : "r"(smem_addr(bar)), "r"(parity)
               : "memory");
  return done != 0;
}

// kClusterScope: acquire at cluster scope (mbar_try_wait_cluster).
template <bool kClusterScope = false>
__device__ __forceinline__ bool mbar_wait_slow(const Sm90MoeParams& p, uint64_t* bar, uint32_t parity,
                                            int counter_id, int index) {
  const uint64_t start = globaltimer_ns();
  for (uint32_t spin = 0;; ++spin) {
    if (kClusterScope ? mbar_try_wait_cluster(bar, parity) : mbar_try_wait(bar, parity)) return true;
    if ((spin & 63) == 63) {
      if (error_raised(p)) return false;
      if (globaltimer_ns() - start > p.timeout_ns) {
        record_error(p, kErrTimeout, counter_id, -1, index, static_cast<int>(parity), -1, -1);
        return false;
      }
    }
  }
}

// Wait for the phase of the given parity to complete. On failure (error recorded) the caller carries on
// without the data: the result is garbage but the kernel still reaches its end.
__device__ __forceinline__ bool mbar_wait(const Sm90MoeParams& p, uint64_t* bar, uint32_t parity, int counter_id,
                                          int index) {
  if (mbar_try_wait(bar, parity)) return true;
  return mbar_wait_slow(p, bar, parity, counter_id, index);
}

// mbar_wait with acquire at cluster scope.
__device__ __forceinline__ bool mbar_wait_cluster(const Sm90MoeParams& p, uint64_t* bar, uint32_t parity,
                                                  int counter_id, int index) {
  return mbar_wait_slow<true>(p, bar, parity, counter_id, index);
}

// ---------------------------------------------------------------------------------------------------------
// Clusters of CTAs (2-CTA pairs: cluster_pairs.cuh). Another CTA's shared memory is reached through a
// shared::cluster address (mapa: the same offset in that CTA).
// ---------------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  return rank;
}

// The shared::cluster address of `local` (an object in this CTA's shared memory) in CTA `cta` of the cluster.
__device__ __forceinline__ uint32_t cluster_map_shared(const void* local, uint32_t cta) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(cta));
  return remote;
}

// An arrival on an mbarrier of any CTA of the cluster, with the instruction's default semantics (release at CTA
// scope). Enough where it only says "my stage is free" and the data that follows is the arriving side's reads, done
// before (CUTLASS's cluster barrier arrives this way; the .release.cluster form cost round 13's probe 1.8x).
__device__ __forceinline__ void mbar_arrive_remote(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}

// An arrival that publishes this thread's earlier shared::cluster writes (a posted task) or orders its earlier reads
// (an inbox read) at cluster scope; the waiter acquires at cluster scope (mbar_wait_cluster).
__device__ __forceinline__ void mbar_arrive_release_cluster(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}

__device__ __forceinline__ void st_shared_cluster(uint32_t cluster_addr, int value) {
  asm volatile("st.shared::cluster.b32 [%0], %1;" ::"r"(cluster_addr), "r"(value) : "memory");
}

// Non-blocking: whether the phase of the given parity completed (acquire at cluster scope).
__device__ __forceinline__ bool mbar_test_wait_cluster(uint64_t* bar, uint32_t parity) {
  uint32_t done;
  asm volatile(MOK_MBAR_POLL("mbarrier.test_wait.parity.acquire.cluster.shared::cta.b64")
               : "=r"(done)
               : "r"(smem_addr(bar)), "r"(parity)
               : "memory");
  return done != 0;
}

// Every thread of both CTAs: the barriers are initialised before any CTA reaches into another (at the start), and
// no CTA exits while the other may still arrive on its barriers or write its shared memory (at the end). Threads
// that exited count as arrived.
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// ---------------------------------------------------------------------------------------------------------
// Named barriers (barrier.sync id, count): id 0 is also __syncthreads'.
// ---------------------------------------------------------------------------------------------------------
enum class NamedBarrier : uint32_t {
  kAll = 0,          // all 384 threads (simple variant's task boundaries)
  kConsumers = 1,    // the two consumer warpgroups (256 threads)
  kConsumerWG0 = 2,  // consumer warpgroup 0 (epilogue staging of rows 0..63)
  kConsumerWG1 = 3,  // consumer warpgroup 1 (rows 64..127)
  kProducers = 4,    // the producer warpgroup (gather mode: the task hand-off from thread 0)
  kDownTurnWG0 = 5,  // ping-pong down task: warpgroup 1 hands the tensor cores to warpgroup 0 (run_down_task)
  kDownTurnWG1 = 6,  // ... and warpgroup 0 to warpgroup 1
};

// NOTE: `barrier.sync` (not `bar.sync`, which means barrier.sync.aligned) so that a warp whose lanes arrive
// from divergent code (one lane claiming a task, the others waiting) is still well defined.
__device__ __forceinline__ void named_barrier_sync(NamedBarrier id, uint32_t threads) {
  asm volatile("barrier.sync %0, %1;" ::"r"(static_cast<uint32_t>(id)), "r"(threads) : "memory");
}

// Arrive without waiting: with `threads` counting both sides, the barrier completes when the waiting side's
// barrier.sync and this side's arrivals are all in (a one-way signal from one warpgroup to another).
__device__ __forceinline__ void named_barrier_arrive(NamedBarrier id, uint32_t threads) {
  asm volatile("barrier.arrive %0, %1;" ::"r"(static_cast<uint32_t>(id)), "r"(threads) : "memory");
}

// ---------------------------------------------------------------------------------------------------------
// Register reallocation between warpgroup roles (sm_90a).
// ---------------------------------------------------------------------------------------------------------
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// ---------------------------------------------------------------------------------------------------------
// The pipelined variant's task queue, read side (consumer warps, store warps): where the next task sits and the
// parity its `task_full` phase will have.
// ---------------------------------------------------------------------------------------------------------
template <int kSlots>
struct TaskQueueCursor {
  uint32_t slot = 0;
  uint32_t parity = 0;

  // After this warp's wait on task_full[slot]: lane 0 reads the task and hands it to the other lanes by shuffles,
  // then arrives on task_empty[slot] for the warp; move to the next slot. `task_slot` gets the slot the task came
  // from. NOTE: one reader per warp, so the arrival releases exactly the read it follows. When every lane read the
  // slot, only __syncwarp ordered the other lanes' reads before lane 0's arrival (correct by the PTX memory model),
  // and compute-sanitizer's racecheck flagged them against the producer's next write of the slot in 1 of 4 runs
  // (round 17); with one reader, 3 of 3 runs were clean (mok/cuda/ROUNDS.md, round 18).
  template <class Storage>
  __device__ __forceinline__ Task take(Storage& s, uint32_t& task_slot) {
    const bool lane0 = (threadIdx.x & 31) == 0;
    __syncwarp();  // converged after the (divergent) wait loop, for the shuffles
    Task t{};
    if (lane0) t = s.tasks[slot];
    t.kind = __shfl_sync(0xFFFFFFFFu, t.kind, 0);
    t.rank = __shfl_sync(0xFFFFFFFFu, t.rank, 0);
    t.minibatch = __shfl_sync(0xFFFFFFFFu, t.minibatch, 0);
    t.tile = __shfl_sync(0xFFFFFFFFu, t.tile, 0);
    t.nblock = __shfl_sync(0xFFFFFFFFu, t.nblock, 0);
    t.expert = __shfl_sync(0xFFFFFFFFu, t.expert, 0);
    t.ticket = __shfl_sync(0xFFFFFFFFu, t.ticket, 0);
    t.padding_half = __shfl_sync(0xFFFFFFFFu, t.padding_half, 0);
    t.cluster = __shfl_sync(0xFFFFFFFFu, t.cluster, 0);
    static_assert(sizeof(Task) == 9 * sizeof(int), "take() shuffles every field of Task");
    task_slot = slot;
    if (lane0) mbar_arrive(&s.task_empty[slot]);
    if (++slot == kSlots) {
      slot = 0;
      parity ^= 1u;
    }
    return t;
  }
};

}  // namespace mok::sm90
