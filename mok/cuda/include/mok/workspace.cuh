// Host/device-shared layout of the SM90 MoE forward megakernel: tile sizes, kernel parameters, the
// device counters, the error record, and the shared-memory storage of one CTA.
//
// Everything the kernel needs arrives in one `Sm90MoeParams` passed by value as a __grid_constant__
// parameter (the TMA tensor maps must live in parameter, constant or global memory; parameter space is the
// cheapest). Sizes are fields, never model constants; the tile shape is the `Sm90Tiles` template argument.
#pragma once

#include <cuda.h>  // CUtensorMap (a plain 128-byte struct; no driver library is linked)
#include <cstdint>

namespace mok::sm90 {

// ---------------------------------------------------------------------------------------------------------
// Tile shape (one instantiation today). BLOCK_M is also the schedule's expert padding, so a tile never
// spans two experts; BLOCK_N = 256 holds 128 gate + 128 up columns in the gate/up GEMM (so the SwiGLU pair
// of a column lives in one thread) and 256 output columns in the down GEMM.
// ---------------------------------------------------------------------------------------------------------
struct Sm90Tiles {
  static constexpr int kBlockM = 128;        // rows per tile = schedule padding (MoKConfig.expert_padding)
  static constexpr int kBlockN = 256;        // accumulator columns per tile
  static constexpr int kHalfN = kBlockN / 2; // gate (or up) columns per gate/up tile; h columns per tile
  static constexpr int kBlockK = 64;         // 64 bf16 = 128 bytes: one 128B-swizzle row per TMA box row
  static constexpr int kStages = 4;          // TMA -> wgmma shared-memory pipeline depth
  static constexpr int kNumConsumerWG = 2;   // consumer warpgroups, 64 rows of the tile each
  static constexpr int kNumThreads = 128 * (1 + kNumConsumerWG);  // + one producer warpgroup
  static constexpr int kCombineTokens = 16;  // tokens per combine task
  static constexpr int kTaskQueue = 2;       // pipelined variant: tasks the producer may run ahead
  static constexpr int kMaxRanks = 64;       // emulated ranks one launch can hold (smem arrays)
  static constexpr int kMaxFirstDispatchParts = 8;  // D(0)'s tiles split into at most 8 tasks (16 rows each)

  static constexpr int kStageBytesA = kBlockM * kBlockK * 2;  // 16 KB
  static constexpr int kStageBytesB = kBlockN * kBlockK * 2;  // 32 KB
  static constexpr int kStageTxBytes = kStageBytesA + kStageBytesB;  // what TMA lands per stage
  static constexpr int kProducerThreads = 128;                       // the producer warpgroup
  static constexpr int kGatherRowsPerPass = kProducerThreads / 8;    // gather: 8 lanes per 128-byte row
  static constexpr int kStagingPitch = kHalfN * 2;                // epilogue staging row: 128 bf16
  static constexpr int kStagingWarpgroupBytes = kBlockM / 2 * kStagingPitch;  // one consumer warpgroup's 64 rows (16 KB)
  static constexpr int kStagingBoxBytes = kBlockM / 2 * 128;       // 64 rows x 64 bf16: one TMA box (8 KB)
  // staging_offset<kTmaBoxes> (epilogue_staging.cuh) computes with these shifts and masks: 64 rows per warpgroup,
  // two boxes of 8 chunks per 128-column row, the warpgroups' bytes filling the staging.
  static_assert(kBlockM / 2 == 64 && kHalfN == 128 && kStagingWarpgroupBytes == 2 * kStagingBoxBytes &&
                    kBlockM * kStagingPitch == kNumConsumerWG * kStagingWarpgroupBytes,
                "the staging layouts' constants");

  static_assert(kBlockK * 2 == 128, "a K block must be exactly one 128-byte swizzle row");
  static_assert(kBlockM % kGatherRowsPerPass == 0, "gather: the producer warpgroup covers the tile in passes");
  static_assert(kBlockM == 64 * kNumConsumerWG, "each consumer warpgroup owns 64 rows (wgmma M = 64)");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "wgmma N must be a multiple of 16, at most 256");
  static_assert(kHalfN <= 256 && kBlockM <= 256, "a TMA box side is at most 256 elements");
  static_assert(kStageBytesA % 1024 == 0 && kStageBytesB % 1024 == 0,
                "stage buffers must keep 1024-byte alignment (128B swizzle atom)");
  static constexpr int kLaunchRegs = (65536 / kNumThreads) / 8 * 8;  // per thread at launch: 168
};

// setmaxnreg budgets of one kernel instantiation (sm90_moe_forward_kernel's kDownPingPong). NOTE: setmaxnreg.inc
// can only take registers the CTA got at launch and the producer gave back, so 128 * producer + 256 * consumer
// must not exceed what __launch_bounds__(384, 1) allocates (168 per thread = 64512); asking for more blocks
// forever. At 40 the producer's admission code spills.
// - Without the ping-pong down task: 56 + 224, which uses exactly that; ptxas (nvcc 13.0) spills in neither role.
// - With it (compiled only into the instantiation that runs it): 64 + 216, chosen on timing. Round 21 timed 64 +
//   216 against 56 + 224 on one kernel that held both down paths (B/A): gather mode gained (anchor-2 0.987,
//   anchor-1 0.992), ring mode lost up to 1.4% (anchor-5 1.009-1.014, anchor-3 1.009, anchor-4 and the slices
//   0.998-1.002): hence one split per instantiation, not one for all. (That kernel's producer spilled 4 bytes at
//   56; the ping-pong instantiation alone compiles spill-free at 56 + 224 too, which has not been timed:
//   experiments/results/h200_2026-11-30_round21/patches/pp_instance_regs_56_224.patch.)
template <bool kDownPingPong>
struct RegisterSplit {
  static constexpr int kProducer = kDownPingPong ? 64 : 56;
  static constexpr int kConsumer = kDownPingPong ? 216 : 224;
  static_assert(kProducer * 128 + kConsumer * 128 * Sm90Tiles::kNumConsumerWG <=
                    Sm90Tiles::kLaunchRegs * Sm90Tiles::kNumThreads,
                "setmaxnreg budgets exceed the CTA's launch allocation: setmaxnreg.inc would wait forever");
  static_assert(kProducer % 8 == 0 && kConsumer % 8 == 0, "setmaxnreg counts are multiples of 8");
};

// The number of tasks (tickets) of a launch: per rank and tile of `capacity` rows a dispatch (ring mode only), the
// gate/up column blocks and the down tasks (column blocks / down_span), plus per rank its `combine_blocks`; the
// first minibatch's dispatches (`minibatch_tiles` tiles) come in `first_dispatch_parts` tasks each (scheduler.cuh).
// mok/cuda/workspace.py (launch_tickets) mirrors it to size the task-timeline buffer; tests/test_cuda_compile.py
// checks the two agree.
template <class Tiles>
__host__ __device__ constexpr long long launch_tickets(int num_ranks, int capacity, int hidden, int intermediate,
                                                       bool dispatch_tasks, int combine_blocks, int down_span = 1,
                                                       int first_dispatch_parts = 1, int minibatch_tiles = 0) {
  const int tiles = capacity / Tiles::kBlockM;
  const int first_tiles = minibatch_tiles < tiles ? minibatch_tiles : tiles;
  return static_cast<long long>(num_ranks) * tiles *
             ((dispatch_tasks ? 1 : 0) + (intermediate + Tiles::kHalfN - 1) / Tiles::kHalfN +
              (hidden + Tiles::kBlockN - 1) / Tiles::kBlockN / down_span) +
         (dispatch_tasks ? static_cast<long long>(num_ranks) * first_tiles * (first_dispatch_parts - 1) : 0) +
         static_cast<long long>(num_ranks) * combine_blocks;
}

// ---------------------------------------------------------------------------------------------------------
// Device counters (int32, zeroed in-stream before every launch by sm90_moe_reset_kernel).
// Every counter only grows during a launch; waits compare with ">=".
// ---------------------------------------------------------------------------------------------------------
struct CounterLayout {
  int ticket;            // [1]      next task ticket (atomic admission order)
  int dispatch_done;     // [R*T]    per schedule tile: its dispatch tasks done (1, or first_dispatch_parts in D(0))
  int gate_up_tile_done; // [R*T]    per schedule tile: gate/up column blocks finished (h written)
  int gate_up_mb_done;   // [R*MB]   per minibatch: gate/up tasks finished (ring x rows free again)
  int down_mb_done;      // [R*MB]   per minibatch: down tasks finished (ring h rows free again)
  int pushed;            // [R]      per source rank: (row, column block) pairs pushed into its slots
  int down_step_done;    // [MB]     per step: down tasks finished, all ranks together (early combine)
  int total;             // ints in the whole block

  __host__ __device__ static CounterLayout make(int num_ranks, int tiles_per_rank, int max_minibatches) {
    CounterLayout c{};
    int at = 0;
    c.ticket = at;            at += 32;  // own 128-byte line: every CTA hammers it
    c.dispatch_done = at;     at += num_ranks * tiles_per_rank;
    c.gate_up_tile_done = at; at += num_ranks * tiles_per_rank;
    c.gate_up_mb_done = at;   at += num_ranks * max_minibatches;
    c.down_mb_done = at;      at += num_ranks * max_minibatches;
    c.pushed = at;            at += num_ranks;
    c.down_step_done = at;    at += max_minibatches;
    c.total = at;
    return c;
  }
};

// Which counter a bounded wait was spinning on (recorded in the error words).
enum CounterId : int {
  kCtrNone = 0,
  kCtrDispatchDone = 1,
  kCtrGateUpTileDone = 2,
  kCtrGateUpMbDone = 3,
  kCtrDownMbDone = 4,
  kCtrPushed = 5,
  kCtrMbarFull = 6,       // TMA -> consumer stage barrier
  kCtrMbarEmpty = 7,      // consumer -> producer stage barrier
  kCtrMbarTaskFull = 8,   // pipelined: producer -> consumer task queue
  kCtrMbarTaskEmpty = 9,  // pipelined: consumer -> producer task queue
  kCtrMbarTaskDone = 10,  // pipelined, signal warp: consumers -> signalling warp (task finished)
  kCtrMbarStaged = 11,    // store warps: a consumer warpgroup's staged rows are ready to store
  kCtrMbarDrained = 12,   // store warps: the staged rows were read, the staging is free again
  kCtrMbarStoresDone = 13,  // store warps: a down task's rows are all stored (the signal warp waits)
  kCtrDownStepDone = 14,    // early combine: every rank's down tasks of a step finished
  kCtrMbarInboxFull = 15,   // clusters: the pair scheduler -> a CTA's producer (a task posted)
  kCtrMbarInboxEmpty = 16,  // clusters: a CTA's producer -> the pair scheduler (its inbox handed back: next, please)
  kCtrMbarPeerFree = 17,    // clusters: the partner CTA's stage is free for this CTA's half of B
};

// Timing ablations (Sm90MoeParams::ablate, a bitmask; experiments/cuda_breakdown.py). Each one removes a piece
// of work (communication, or the GEMM epilogues) so that its cost can be measured as a difference; the results
// are then garbage.
// Dependencies and signals stay as they are, so the task order and its deadlock freedom do not change.
enum AblateFlags : int {
  kAblateNone = 0,
  kAblateDispatch = 1,  // dispatch tasks copy nothing (gate/up reads whatever the ring holds)
  kAblateCombine = 2,   // combine tasks neither wait for the pushes nor sum anything
  kAblatePush = 4,      // the down epilogue stores its rows contiguously instead of scattering them to slots
  kAblateComm = 7,      // all communication work
  kAblateEpilogue = 8,  // GEMM epilogues neither compute nor store (no SwiGLU, no staging, no h, no y)
  kAblateAll = 15,
  kAblateStores = 16,      // GEMM epilogues compute and stage their tiles but store nothing to global memory
  kProbeReleaseReds = 32,  // not an ablation (results stay right): counter updates as red.release, round 7's form
};

enum ErrorCode : int {
  kErrNone = 0,
  kErrTimeout = 1,        // a bounded wait ran out of time (deadlock or a lost signal)
  kErrBadSchedule = 2,    // a used tile has no expert, or a row names a rank outside [0, R)
};

// Error record (int32 words): the first error wins (atomicCAS on word 0).
enum ErrorWord : int {
  kErrWordCode = 0,
  kErrWordCounter = 1,   // CounterId
  kErrWordRank = 2,
  kErrWordIndex = 3,     // tile, minibatch or stage, depending on the counter
  kErrWordSeen = 4,      // value observed when the wait gave up
  kErrWordExpected = 5,
  kErrWordBlock = 6,     // blockIdx.x
  kErrWordTicket = 7,
  kErrorWords = 8,
};

// ---------------------------------------------------------------------------------------------------------
// Kernel parameters.
// ---------------------------------------------------------------------------------------------------------
struct Sm90MoeParams {  // aligned as CUtensorMap (128 bytes in CUDA 13)
  // TMA descriptors, 128-byte swizzle, box inner side 64 bf16.
  CUtensorMap tmap_ring_x;  // ring x  [R'*ring_rows, H], box {64, 128}: gate/up A (R': see ring_x below)
  CUtensorMap tmap_ring_h;  // ring h  [R'*ring_rows, I], box {64, 128}: down A
  CUtensorMap tmap_w_gate;  // w_gate  [E*I, H],          box {64, 128}: gate/up B rows 0..127
  CUtensorMap tmap_w_up;    // w_up    [E*I, H],          box {64, 128}: gate/up B rows 128..255
  CUtensorMap tmap_w_down;  // w_down  [E*H, I],          box {64, 256}: down B
  CUtensorMap tmap_y;       // y       [R*capacity, H],   box {64, 64}:  down output stores (down_tma only)
  CUtensorMap tmap_h_store; // ring h  [R'*ring_rows, I], box {64, 64}:  gate/up h stores (bf16)

  // Problem sizes.
  int num_ranks;             // R emulated (or real) expert-parallel ranks in this launch
  int tokens_per_rank;       // T_local
  int top_k;                 // K
  int hidden;                // H (multiple of 64)
  int intermediate;          // I (multiple of 64)
  int num_local_experts;     // E / R (one real rank per launch: E)
  int capacity;              // rows of each rank's schedule table (multiple of BLOCK_M)
  int tiles_per_rank;        // capacity / BLOCK_M
  int minibatch_rows;        // rows per ring minibatch (multiple of BLOCK_M)
  int tiles_per_minibatch;   // minibatch_rows / BLOCK_M
  int ring_rows;             // rows of each rank's ring (multiple of minibatch_rows)
  int ring_slots;            // ring_rows / minibatch_rows
  int max_minibatches;       // ceil(capacity / minibatch_rows): size of the per-minibatch counters
  int gate_up_nblocks;       // ceil(I / kHalfN)
  int down_nblocks;          // ceil(H / kBlockN): column blocks of a down tile row (what `pushed` counts)
  int down_span;             // column blocks per down task (divides down_nblocks; ScheduleView::down_nblocks is
                             //    down_nblocks / down_span, the down tasks per tile)
  int combine_blocks;        // ceil(T_local / kCombineTokens) per rank; 0 when fuse_top1 (no combine tasks)
  int combine_tasks;         // combine tasks after the last step: combine_blocks for each rank combined in this
                             //    launch (all, or a real rank's own); 0 with early combine (ScheduleView)
  int fuse_top1;             // 1: top_k == 1 and the down epilogue writes out[token] = bf16(0 + w * y) itself
  int ablate;                // AblateFlags bitmask (timing experiments only; 0 in normal runs)
  int gather_x;              // 1: gate/up gathers A rows from x_ptrs itself (no dispatch tasks, ring x unused)
  int gather_prefetch;       // gather mode: K blocks ahead the producer asks L2 for the token rows (0 = never)
  int gather_row_prefetch;   // gather mode: at each gate/up tile's start, one bulk L2 prefetch per whole token row
  int signal_warp;           // 1: warp 1 of the producer warpgroup signals finished tasks (pipelined, ring mode)
  int store_warps;           // 1: warps 2-3 of the producer warpgroup store the down tiles' staged rows (and, bf16,
                             //    the gate/up tiles' h rows)
                             //    (store_warps.cuh; needs signal_warp, and ablate == 0)
  int overlap_steps;         // 1: G(s) and W(s - 1) share a group of the task order (scheduler.cuh)
  int spread_dispatch;       // 1: D(s + 1)'s tasks lie among G(s)'s in one group of the task order (scheduler.cuh)
  int down_tma;              // 1: y and y_rows are set (the down tiles leave by TMA; see y below)
  int first_dispatch_parts;  // D(0)'s dispatch tasks per tile (1..kMaxFirstDispatchParts; scheduler.cuh)
  int down_ping_pong;        // 1: the consumer warpgroups take turns on a down block's column halves (run_down_task);
                             //    the launch runs the kernel instantiated with kDownPingPong exactly when it is 1
  int down_tasks_per_tile;   // down_nblocks / down_span
  int skip_padding_half;     // 1: a GEMM tile whose rows 64..127 are all padding runs one warpgroup's MMA
                             //    (pipelined variant; Task::padding_half; the other's accumulators stay zero)
  int mxfp8;                 // 1: token rows are packed MXFP8 rows (mxfp8.cuh), h is MX-rounded (ring mode only)
  int x_row_bytes;           // bytes from one token row to the next in x_ptrs' buffers (bf16: 2H)
  int local_rank;            // -1: every rank emulated here; r >= 0: this launch is real rank r (launch.cuh)
  int phases;                // RankPhases bitmask: which of the expert tasks and the combine tasks run
  int clusters;              // 1: 2-CTA clusters; the pairs of gate/up row tiles that share a weight tile load it
                             //    once, half by each CTA, multicast to both (cluster_pairs.cuh; the launch runs the
                             //    kClusters instantiation exactly when it is 1)

  // Schedule tables (mok.schedule.Schedule), int32, row-major per rank.
  const int* src_rank;         // [R, capacity]   source rank of each row; -1 on padding
  const int* src_slot;         // [R, capacity]   local_token * K + k on the source; -1 on padding
  const int* tile_expert;      // [R, tiles]      local expert of each tile; -1 past the used rows
  const int* segment_offsets;  // [R, E_local+1]  last entry: rows in use (padding included)

  // Early combine (optional; both nullptr: every combine task after the last step, tokens in order). A token is
  // "ready" after the step (minibatch) of the last of its K rows in any rank's table; its weighted sum can run
  // while later steps' GEMMs do (scheduler.cuh). mok/cuda/schedule_tables.py, combine_order().
  const int* combine_tokens;   // [R, T_local]  each rank's tokens sorted by ready step; block b = 16b..16b+15
  const int* combine_offsets;  // [R, MB + 1]   first block placed in each step; last = ceil(T_local / 16)

  // Peer pointer tables: entry s is rank s's buffer base address (mok.comm.PeerBuffer.ptr_table).
  const long long* x_ptrs;        // -> bf16  [T_local, H]      tokens (dispatch pulls from here); MXFP8:
                                  //    uint8 [T_local, x_row_bytes] packed rows
  const long long* weight_ptrs;   // -> fp32  [T_local * K]     router weights
  const long long* combine_ptrs;  // -> bf16  [T_local * K, H]  combine slots (the down push; unused with down_tma)
  const long long* out_ptrs;      // -> bf16  [T_local, H]      layer output

  // down_tma (emulated ranks, top-k > 1; combine.cuh): the down tiles go out whole by TMA stores into y, a buffer
  // laid out like the schedule (row = schedule row, as saved_gate_up), and the weighted sum reads each (token, k)
  // row through y_rows instead of from the combine slots. nullptr: the push into the slots.
  void* y;             // bf16 [R * capacity, H]
  int* y_rows;   // [R, T_local * K]  schedule row in y of each source rank's (token, k); written by the down tasks

  // Ring buffers owned by this launch, R' ranks stacked (R' = R, or 1 for one real rank: own_slot() below):
  // written with generic stores, read by TMA.
  void* ring_x;  // bf16 [R' * ring_rows, H]
  void* ring_h;  // bf16 [R' * ring_rows, I]
  // Optional (training): bf16 [R' * capacity, 2I], row = the schedule row, columns gate | up, rounded to bf16
  // (what the Triton backward reads instead of recomputing the gate/up GEMM). nullptr = not written.
  void* saved_gate_up;
  // Optional (experiments/task_timeline.py): a task timeline, kTraceFields int64 per ticket (trace.cuh); rows from
  // trace_tickets on are not recorded. nullptr = none (the default: one untaken branch per mark).
  long long* trace;
  int trace_tickets;

  int* counters;          // CounterLayout::total int32, zero at launch
  int* error;             // kErrorWords int32, zero at launch
  CounterLayout ctr;
  unsigned long long timeout_ns;  // bound of every spin
};

// Which tasks a launch runs. Emulated ranks run both in one launch; a real rank runs the expert tasks, then
// (after every GPU's pushes landed: a barrier between the launches) the combine of its own tokens.
enum RankPhases : int { kPhaseExperts = 1, kPhaseCombine = 2, kPhasesAll = 3 };

// The slot of rank `rank` in this launch's own buffers (ring, saved rows, weights): rank-strided when every rank
// is emulated here, slot 0 when the launch is one real rank's.
__host__ __device__ inline int own_slot(const Sm90MoeParams& p, int rank) { return p.local_rank >= 0 ? 0 : rank; }

// ---------------------------------------------------------------------------------------------------------
// One task, as claimed from the ticket counter (see scheduler.cuh for the order).
// ---------------------------------------------------------------------------------------------------------
// kTaskIdle: a ticket that pads a group of the task order to an even size with clusters (scheduler.cuh,
// ScheduleView::pair_units); no CTA runs it.
enum TaskKind : int { kTaskStop = 0, kTaskDispatch = 1, kTaskGateUp = 2, kTaskDown = 3, kTaskCombine = 4, kTaskIdle = 5 };

struct Task {
  int kind;       // TaskKind
  int rank;       // expert-side rank (combine: the source rank whose tokens are summed)
  int minibatch;  // minibatch of the tile (dispatch, gate/up, down); combine: the step an early-combine block
                  // was placed in (ScheduleView::combine_ready_step), or -1
  int tile;       // schedule tile index within the rank's table (combine: first position of its tokens in the
                  // rank's token order: the token itself, or its place in combine_tokens)
  int nblock;     // column block (gate/up: of I in kHalfN; down: of H in kBlockN, or, in a task's own copy, the
                  // task's index within the tile when down_span > 1: its blocks are down_block(p, t, 0..span-1))
  int expert;     // global expert of the tile (gate/up, down)
  int ticket;
  // GEMM tasks: 1 if rows 64..127 of the tile are all padding (its expert's rows end in the first half), so
  // consumer warpgroup 1 has nothing to multiply (set by the pipelined producer when p.skip_padding_half; else 0).
  int padding_half;
  // Clusters only (cluster_pairs.cuh; else 0): bit 0, the task is one half of a pair, whose CTAs each load half of
  // the weight tile for both; bits 1-2, stages this CTA passes unused before the task, so that both halves of a pair
  // start at the same stage of their rings (a multicast lands at the same offset in both CTAs).
  int cluster;
};

__host__ __device__ inline bool is_pair_half(const Task& t) { return (t.cluster & 1) != 0; }
__host__ __device__ inline int stages_to_pass(const Task& t) { return t.cluster >> 1; }

// The schedule-table row (index into src_rank / src_slot) of row 0 of task t's tile (dispatch, gate/up, down).
template <class Tiles>
__device__ __forceinline__ long long table_row0(const Sm90MoeParams& p, const Task& t) {
  return static_cast<long long>(t.rank) * p.capacity + static_cast<long long>(t.tile) * Tiles::kBlockM;
}

// ---------------------------------------------------------------------------------------------------------
// Shared memory of one CTA. Stage buffers first, each 1024-byte aligned (the 128B swizzle atom).
// ---------------------------------------------------------------------------------------------------------
template <class Tiles>
struct alignas(1024) SharedStorage {
  uint8_t a[Tiles::kStages][Tiles::kStageBytesA];  // A tiles: 128 rows x 64 K, swizzled by TMA
  uint8_t b[Tiles::kStages][Tiles::kStageBytesB];  // B tiles: 256 rows x 64 K, swizzled by TMA
  // Epilogue staging: 128 rows x 128 bf16; consumer warpgroup w owns rows 64w..+63, in bytes [16 KB w, 16 KB (w + 1)),
  // laid out as rows (StagingLayout::kRows) or as two 8 KB TMA boxes of 64 x 64 (kTmaBoxes), 16-byte chunks
  // XOR-swizzled by (row & 7) in both, so that the fragment writes and the row reads are free of bank conflicts
  // (epilogue_staging.cuh).
  alignas(1024) uint8_t staging[Tiles::kBlockM * Tiles::kStagingPitch];  // (1024: a TMA store's 128B-swizzle source)
  uint64_t full[Tiles::kStages];    // TMA bytes landed (and, in gather mode, the producers' cp.async rows)
  uint64_t empty[Tiles::kStages];   // consumers done reading
  uint64_t task_full[Tiles::kTaskQueue];
  uint64_t task_empty[Tiles::kTaskQueue];
  uint64_t task_done[Tiles::kTaskQueue];  // signal warp: every consumer warp finished the slot's task
  uint64_t staged[Tiles::kNumConsumerWG];   // store warps: consumer warpgroup w's rows are in the staging tile
  uint64_t drained[Tiles::kNumConsumerWG];  // store warps: ... and have been read out of it
  uint64_t stores_done[Tiles::kTaskQueue];  // store warps: both stored the down task in this queue slot
  Task tasks[Tiles::kTaskQueue];
  int rank_tiles[Tiles::kMaxRanks];       // used tiles (rows_used / BLOCK_M) of every rank
  // Rows pushed to each source rank by the down task in task-queue slot i (the simple variant uses entry 0).
  int push_count[Tiles::kTaskQueue][Tiles::kMaxRanks];
  int num_steps;                          // max over ranks of the number of minibatches
  // Gather mode and clusters never run together (the launch checks), so their tables share these bytes: the struct
  // rounds up to whole KB (alignas), and a separate cluster table would cost a KB the stages do not leave.
  union {
    const char* gather_src[Tiles::kBlockM];  // gather mode: source row of each row of the tile being loaded
    // Clusters (cluster_pairs.cuh). Every CTA: the task the pair scheduler posted to it (an inbox of one task: a
    // producer asks for its next task by handing the inbox back), and the barriers its producer waits on. The
    // cluster's CTA 0 also: whether each CTA's producer has handed its inbox back.
    struct {
      Task inbox;
      uint64_t inbox_full;      // a task posted (release at cluster scope by the scheduler)
      uint64_t inbox_empty[2];  // CTA 0 only: CTA c's producer handed its inbox back
      uint64_t peer_free[Tiles::kStages];             // the partner's stage is free for this CTA's half of B
      uint32_t peer_parity;                           // producer: bit i, the parity of peer_free[i]'s next phase
    };
  };
};

template <class Tiles>
constexpr int shared_storage_bytes() {
  // + 1 KB so the kernel can align the dynamic shared memory base to 1024 bytes itself.
  return static_cast<int>(sizeof(SharedStorage<Tiles>)) + 1024;
}

static_assert(shared_storage_bytes<Sm90Tiles>() <= 232448, "shared memory exceeds the 227 KB SM90 limit");

}  // namespace mok::sm90
