// Host side of the SM90 MoE forward: checks, TMA descriptors, counter reset, launch. No torch here, so CI
// compiles this file with plain nvcc (tests/test_cuda_compile.py).
//
// Instantiations: Sm90Tiles x {simple, pipelined, pipelined with the ping-pong down task}. Nothing else is
// templated, to keep the JIT build short.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "mok/host_error.cuh"
#include "mok/launch.cuh"
#include "mok/sm90_moe_forward.cuh"
#include "mok/weighted_sum.cuh"

namespace mok::sm90 {
namespace {

using Tiles = Sm90Tiles;

// cuTensorMapEncodeTiled through the runtime's driver entry point: no link against libcuda needed.
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled_fn() {
  static EncodeTiledFn fn = [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess) {
      ptr = nullptr;
    }
    return reinterpret_cast<EncodeTiledFn>(ptr);
  }();
  return fn;
}

// A 2-D bf16 row-major matrix [rows, cols] read in boxes of {64 columns, box_rows rows}, 128B swizzle.
bool encode_bf16_2d(CUtensorMap* map, const void* base, uint64_t rows, uint64_t cols, uint32_t box_rows,
                    char* message, size_t message_len, const char* what) {
  EncodeTiledFn fn = encode_tiled_fn();
  if (fn == nullptr) {
    fail(message, message_len, "cuTensorMapEncodeTiled is unavailable from the CUDA driver");
    return false;
  }
  const cuuint64_t dims[2] = {cols, rows};
  const cuuint64_t strides[1] = {cols * 2};  // bytes between rows
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(Tiles::kBlockK), box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult rc = fn(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims, strides, box,
                         element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (rc != CUDA_SUCCESS) {
    fail(message, message_len, "cuTensorMapEncodeTiled failed for %s (rows=%llu cols=%llu box_rows=%u): CUresult %d",
         what, static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols), box_rows,
         static_cast<int>(rc));
    return false;
  }
  return true;
}

bool aligned16(const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; }

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

int64_t sm90_moe_counter_ints(int num_ranks, int capacity, int minibatch_rows) {
  if (num_ranks <= 0 || capacity <= 0 || minibatch_rows <= 0) return 0;
  const int tiles_per_rank = capacity / Tiles::kBlockM;
  const int max_minibatches = ceil_div(capacity, minibatch_rows);
  return CounterLayout::make(num_ranks, tiles_per_rank, max_minibatches).total;
}

int sm90_moe_error_words() { return kErrorWords; }

int sm90_moe_shared_memory_bytes() { return shared_storage_bytes<Tiles>(); }

int sm90_moe_forward(const Sm90MoeProblem& q, cudaStream_t stream, char* message, size_t message_len) {
  // ---- sizes and divisibility (the kernel's assumptions, each with the reason) ----
  if (q.num_ranks < 1 || q.num_ranks > Tiles::kMaxRanks)
    return fail(message, message_len, "num_ranks must be in [1, %d], got %d", Tiles::kMaxRanks, q.num_ranks);
  if (q.tokens_per_rank < 1 || q.top_k < 1)
    return fail(message, message_len, "tokens_per_rank (%d) and top_k (%d) must be >= 1", q.tokens_per_rank, q.top_k);
  if (q.hidden < Tiles::kBlockK || q.hidden % Tiles::kBlockK != 0)
    return fail(message, message_len, "hidden (H=%d) must be a positive multiple of %d (the GEMM K block)",
                q.hidden, Tiles::kBlockK);
  if (q.intermediate < Tiles::kBlockK || q.intermediate % Tiles::kBlockK != 0)
    return fail(message, message_len, "intermediate (I=%d) must be a positive multiple of %d (the down GEMM K block)",
                q.intermediate, Tiles::kBlockK);
  const bool one_rank = q.local_rank >= 0;  // one real rank per launch (launch.cuh)
  const int own_ranks = one_rank ? 1 : q.num_ranks;  // ranks whose experts, ring and saved rows this launch holds
  if (q.local_rank < -1 || q.local_rank >= q.num_ranks)
    return fail(message, message_len, "local_rank (%d) must be -1 or in [0, num_ranks=%d)", q.local_rank,
                q.num_ranks);
  if (q.phases < 1 || q.phases > kPhasesAll)
    return fail(message, message_len, "phases must be 1 (experts), 2 (combine) or 3 (both), got %d", q.phases);
  // Expert tasks and the combine in one launch need every push to land in this launch's counters: all ranks
  // emulated here, or a single rank.
  if (one_rank && q.phases == kPhasesAll && q.num_ranks > 1)
    return fail(message, message_len, "one real rank of %d runs its expert tasks and its combine in separate "
                "launches (phases 1, a barrier across the GPUs, then phases 2)", q.num_ranks);
  if (!one_rank && q.phases != kPhasesAll)
    return fail(message, message_len, "emulated ranks run every phase in one launch (phases 3), got %d", q.phases);
  if (q.num_experts < own_ranks || q.num_experts % own_ranks != 0)
    return fail(message, message_len, "num_experts (%d) must be a multiple of num_ranks (%d), or >= 1 for one "
                "real rank's experts", q.num_experts, q.num_ranks);
  if (q.capacity <= 0 || q.capacity % Tiles::kBlockM != 0)
    return fail(message, message_len, "capacity (%d) must be a positive multiple of %d (the tile height)", q.capacity,
                Tiles::kBlockM);
  if (q.minibatch_rows <= 0 || q.minibatch_rows % Tiles::kBlockM != 0)
    return fail(message, message_len, "minibatch_rows (%d) must be a positive multiple of %d", q.minibatch_rows,
                Tiles::kBlockM);
  if (q.ring_rows <= 0 || q.ring_rows % q.minibatch_rows != 0)
    return fail(message, message_len, "ring_rows (%d) must be a positive multiple of minibatch_rows (%d)",
                q.ring_rows, q.minibatch_rows);
  if (q.fuse_top1 && q.top_k != 1)
    return fail(message, message_len, "fuse_top1 needs top_k == 1 (one slot per token), got top_k = %d", q.top_k);
  const int x_row_bytes = q.x_row_bytes != 0 ? q.x_row_bytes : 2 * q.hidden;
  if (q.mxfp8 && q.gather_x)
    return fail(message, message_len, "MXFP8 token rows need ring dispatch (gather copies bf16 rows as they are)");
  if (q.mxfp8 && (x_row_bytes < q.hidden + q.hidden / 32 || x_row_bytes % 16 != 0))
    return fail(message, message_len, "MXFP8 rows of H=%d need >= %d bytes, a multiple of 16; got x_row_bytes=%d",
                q.hidden, q.hidden + q.hidden / 32, x_row_bytes);
  if (!q.mxfp8 && x_row_bytes != 2 * q.hidden)
    return fail(message, message_len, "bf16 token rows are 2H = %d bytes, got x_row_bytes=%d", 2 * q.hidden,
                x_row_bytes);
  if (q.gather_prefetch < 0)
    return fail(message, message_len, "gather_prefetch must be >= 0 (K blocks ahead), got %d", q.gather_prefetch);
  constexpr int kKnownFlags = kAblateAll | kAblateStores | kProbeReleaseReds;
  if (q.ablate < 0 || (q.ablate & ~kKnownFlags) != 0)
    return fail(message, message_len, "ablate must be a bitmask of AblateFlags (%#x), got %d", kKnownFlags,
                q.ablate);

  // ---- 32-bit index ranges (TMA coordinates and tickets are int32) ----
  const long long ring_total = static_cast<long long>(own_ranks) * q.ring_rows;
  const long long weight_rows = static_cast<long long>(q.num_experts) * (q.intermediate > q.hidden ? q.intermediate : q.hidden);
  const int tiles_per_rank = q.capacity / Tiles::kBlockM;
  const int gate_up_nblocks = ceil_div(q.intermediate, Tiles::kHalfN);
  const int down_nblocks = ceil_div(q.hidden, Tiles::kBlockN);
  // Fused top-1: the down epilogue writes the output itself, so the task order has no combine tasks.
  // An experts-only launch (one real rank) leaves the combine to a later launch.
  const int combine_blocks =
      (q.fuse_top1 || !(q.phases & kPhaseCombine)) ? 0 : ceil_div(q.tokens_per_rank, Tiles::kCombineTokens);
  const bool early_combine = q.combine_tokens != nullptr;
  if (early_combine != (q.combine_offsets != nullptr))
    return fail(message, message_len, "early combine needs both combine_tokens and combine_offsets, or neither");
  if (early_combine && (one_rank || combine_blocks == 0))
    return fail(message, message_len, "early combine is for emulated ranks with combine tasks (not one real rank's "
                "launch, not the fused top-1 combine)");
  const int max_minibatches = ceil_div(q.capacity, q.minibatch_rows);
  if (q.first_dispatch_parts < 0 || q.first_dispatch_parts > Tiles::kMaxFirstDispatchParts)
    return fail(message, message_len, "first_dispatch_parts must be in [0, %d] (0: auto), got %d",
                Tiles::kMaxFirstDispatchParts, q.first_dispatch_parts);
  if (q.down_span < 1 || down_nblocks % q.down_span != 0)
    return fail(message, message_len, "down_span must divide the %d column blocks of H=%d, got %d", down_nblocks,
                q.hidden, q.down_span);
  // Overlapped steps put W(s - 1) beside G(s), so G(s) may not wait for W(s - 1): the ring must hold two
  // minibatches (or the whole schedule, whose rows are never overwritten).
  const int ring_slots = q.ring_rows / q.minibatch_rows;
  const bool ring_holds_two = ring_slots >= (max_minibatches < 2 ? max_minibatches : 2);
  if (q.overlap_steps && (early_combine || !ring_holds_two))
    return fail(message, message_len, "overlap_steps needs a ring of at least 2 minibatches (or the whole "
                "schedule; got %d of %d) and no early combine", ring_slots, max_minibatches);
  // Spread dispatch puts D(s + 1) among G(s), so D(s + 1) may not wait for G(s): the same ring condition. And not with
  // overlapped steps, whose G group holds down tasks too. (Gather mode has no dispatch tasks: the switch is ignored.)
  if (q.spread_dispatch && !q.gather_x && (q.overlap_steps || !ring_holds_two))
    return fail(message, message_len, "spread_dispatch needs a ring of at least 2 minibatches (or the whole "
                "schedule; got %d of %d) and no overlap_steps", ring_slots, max_minibatches);
  const bool down_tma = q.y != nullptr;
  if (down_tma != (q.y_rows != nullptr)) return fail(message, message_len, "down_tma needs both y and y_rows, or neither");
  if (down_tma && (one_rank || q.fuse_top1 || combine_blocks == 0))
    return fail(message, message_len, "down_tma is for emulated ranks with combine tasks (not one real rank's launch, "
                "not the fused top-1 combine)");
  if (down_tma && q.mxfp8) return fail(message, message_len, "down_tma is not tested with MXFP8 layers");
  if (down_tma && !aligned16(q.y)) return fail(message, message_len, "y must be 16-byte aligned (TMA)");
  // The combine's table of (row, weight) per (token, k) of a task lives in the staging (combine.cuh).
  if (down_tma && static_cast<long long>(Tiles::kCombineTokens) * q.top_k * 8 > Tiles::kBlockM * Tiles::kStagingPitch)
    return fail(message, message_len, "down_tma supports top_k up to %d, got %d",
                Tiles::kBlockM * Tiles::kStagingPitch / (8 * Tiles::kCombineTokens), q.top_k);
  // Only the pipelined variant in ring mode has an idle producer warp to signal with.
  const bool signal_warp = q.signal_warp && q.variant == Sm90Variant::kPipelined && !q.gather_x;
  // Ping-pong down blocks (run_down_task; mok/cuda/ROUNDS.md, round 21): with down_tma in the pipelined
  // variant, where the warpgroups meet at every task's end: not with the signal warp, whose warpgroups drift apart
  // between tasks (the store warps come only with it). And only where a down block's whole K fits in the stage ring:
  // the second warpgroup releases a stage only in its own turn, so a first warpgroup needing more than kStages K
  // blocks in one turn would wait for a stage forever.
  if (q.down_ping_pong && !(down_tma && q.variant == Sm90Variant::kPipelined && !signal_warp &&
                            q.intermediate <= Tiles::kStages * Tiles::kBlockK))
    return fail(message, message_len, "down_ping_pong needs down_tma, the pipelined variant without the signal warp "
                "and I <= %d (a down block's whole K in the stage ring); got down_tma=%d, pipelined=%d, signal warp=%d, "
                "I=%d", Tiles::kStages * Tiles::kBlockK, down_tma ? 1 : 0,
                q.variant == Sm90Variant::kPipelined ? 1 : 0, signal_warp ? 1 : 0, q.intermediate);
  // Clusters: the pair scheduler runs beside the signal thread and feeds the one producer thread of ring mode; the
  // multicast needs both halves of a pair in one plain gate/up task order (not mixed with down tasks).
  if (q.clusters && !(q.variant == Sm90Variant::kPipelined && signal_warp && !q.overlap_steps && !q.down_ping_pong))
    return fail(message, message_len, "clusters need the pipelined variant in ring mode with the signal warp, without "
                "overlap_steps or down_ping_pong; got pipelined=%d, gather=%d, signal warp=%d, overlap_steps=%d, "
                "down_ping_pong=%d", q.variant == Sm90Variant::kPipelined ? 1 : 0, q.gather_x ? 1 : 0,
                signal_warp ? 1 : 0, q.overlap_steps ? 1 : 0, q.down_ping_pong ? 1 : 0);
  // The sum as a kernel of its own (weighted_sum.cuh) reads every rank's slots (or y) after the megakernel ends.
  if (q.sum_kernel && (one_rank || combine_blocks == 0 || early_combine))
    return fail(message, message_len, "sum_kernel is for emulated ranks with combine tasks (not one real rank's "
                "launch, not the fused top-1 combine) and without early combine");
  if (q.sum_kernel && q.top_k > kSumMaxTopK)
    return fail(message, message_len, "sum_kernel supports top_k up to %d, got %d", kSumMaxTopK, q.top_k);
  const long long tickets = launch_tickets<Tiles>(q.num_ranks, q.capacity, q.hidden, q.intermediate, !q.gather_x,
                                                  combine_blocks, q.down_span, Tiles::kMaxFirstDispatchParts,
                                                  q.minibatch_rows / Tiles::kBlockM);
  const long long pushed = static_cast<long long>(q.tokens_per_rank) * q.top_k * down_nblocks;
  if (ring_total >= (1ll << 31) || weight_rows >= (1ll << 31) || tickets >= (1ll << 31) || pushed >= (1ll << 31))
    return fail(message, message_len, "problem too large for 32-bit tile coordinates or counters");

  // ---- pointers ----
  const void* required[] = {q.src_rank, q.src_slot, q.tile_expert, q.segment_offsets, q.x_ptrs, q.weight_ptrs,
                            q.combine_ptrs, q.out_ptrs, q.w_gate, q.w_up, q.w_down, q.ring_x, q.ring_h,
                            q.counters, q.error};
  for (const void* ptr : required) {
    if (ptr == nullptr) return fail(message, message_len, "a required device pointer is null");
    if (!aligned16(ptr)) return fail(message, message_len, "device pointers must be 16-byte aligned (TMA, uint4 copies)");
  }

  // ---- parameters ----
  Sm90MoeParams p{};
  p.num_ranks = q.num_ranks;
  p.tokens_per_rank = q.tokens_per_rank;
  p.top_k = q.top_k;
  p.hidden = q.hidden;
  p.intermediate = q.intermediate;
  p.num_local_experts = q.num_experts / own_ranks;
  p.capacity = q.capacity;
  p.tiles_per_rank = tiles_per_rank;
  p.minibatch_rows = q.minibatch_rows;
  p.tiles_per_minibatch = q.minibatch_rows / Tiles::kBlockM;
  p.ring_rows = q.ring_rows;
  p.ring_slots = ring_slots;
  p.max_minibatches = max_minibatches;
  p.gate_up_nblocks = gate_up_nblocks;
  p.down_nblocks = down_nblocks;
  p.combine_blocks = combine_blocks;
  // Every rank's blocks, or (one real rank per launch) only its own; none with early combine (placed in the steps).
  p.combine_tasks = early_combine || q.sum_kernel ? 0 : (one_rank ? 1 : q.num_ranks) * combine_blocks;
  p.fuse_top1 = q.fuse_top1 ? 1 : 0;
  p.ablate = q.ablate;
  p.gather_x = q.gather_x ? 1 : 0;
  p.gather_prefetch = q.gather_prefetch;
  p.gather_row_prefetch = q.gather_row_prefetch ? 1 : 0;
  p.mxfp8 = q.mxfp8 ? 1 : 0;
  p.x_row_bytes = x_row_bytes;
  // (The signal warp runs with down_tma too: each warpgroup's rows stay in its own 16 KB of the staging in both
  // layouts, so the two warpgroups need not meet between tasks; round 19's first box layout needed them to.)
  p.signal_warp = signal_warp ? 1 : 0;
  // The store warps are idle producer warps too, and hand-offs with the signal warp; the timing ablations skip
  // epilogue work the hand-off expects, so they run without them.
  // With down_tma the rows leave by TMA, so there is nothing for the store warps to push.
  p.store_warps = (q.store_warps && p.signal_warp && q.ablate == 0 && !down_tma) ? 1 : 0;
  // The store warps' hand-off runs one phase per down task of one column block (store_warps.cuh).
  if (q.down_span > 1 && p.store_warps)
    return fail(message, message_len, "down_span > 1 needs store_warps off (they hand off one block per task)");
  p.down_span = q.down_span;
  p.down_tasks_per_tile = down_nblocks / q.down_span;  // (down_span divides down_nblocks: checked above)
  p.overlap_steps = q.overlap_steps ? 1 : 0;
  p.spread_dispatch = q.spread_dispatch && !q.gather_x ? 1 : 0;  // (gather mode has no dispatch tasks to spread)
  p.down_tma = down_tma ? 1 : 0;
  p.down_ping_pong = q.down_ping_pong ? 1 : 0;
  p.y = q.y;
  p.y_rows = q.y_rows;
  p.skip_padding_half = q.skip_padding_half ? 1 : 0;
  p.local_rank = q.local_rank;
  p.phases = q.phases;
  p.clusters = q.clusters ? 1 : 0;
  p.src_rank = q.src_rank;
  p.src_slot = q.src_slot;
  p.tile_expert = q.tile_expert;
  p.segment_offsets = q.segment_offsets;
  p.combine_tokens = q.combine_tokens;
  p.combine_offsets = q.combine_offsets;
  p.x_ptrs = reinterpret_cast<const long long*>(q.x_ptrs);
  p.weight_ptrs = reinterpret_cast<const long long*>(q.weight_ptrs);
  p.combine_ptrs = reinterpret_cast<const long long*>(q.combine_ptrs);
  p.out_ptrs = reinterpret_cast<const long long*>(q.out_ptrs);
  p.ring_x = q.ring_x;
  p.ring_h = q.ring_h;
  p.saved_gate_up = q.saved_gate_up;
  p.trace = reinterpret_cast<long long*>(q.trace);
  p.trace_tickets = q.trace != nullptr ? q.trace_tickets : 0;
  p.counters = q.counters;
  p.error = q.error;
  p.ctr = CounterLayout::make(q.num_ranks, tiles_per_rank, p.max_minibatches);
  p.timeout_ns = static_cast<unsigned long long>((q.timeout_s > 0 ? q.timeout_s : 10.0) * 1e9);

  const uint64_t E = static_cast<uint64_t>(q.num_experts);
  const uint64_t H = static_cast<uint64_t>(q.hidden);
  const uint64_t I = static_cast<uint64_t>(q.intermediate);
  if (!encode_bf16_2d(&p.tmap_ring_x, q.ring_x, ring_total, H, Tiles::kBlockM, message, message_len, "ring x") ||
      !encode_bf16_2d(&p.tmap_ring_h, q.ring_h, ring_total, I, Tiles::kBlockM, message, message_len, "ring h") ||
      // h: one consumer warpgroup's 64 rows of a 64-column box per store (swiglu_epilogue.cuh, store_h_tma).
      !encode_bf16_2d(&p.tmap_h_store, q.ring_h, ring_total, I, 64, message, message_len, "ring h (stores)") ||
      !encode_bf16_2d(&p.tmap_w_gate, q.w_gate, E * I, H, Tiles::kHalfN, message, message_len, "w_gate") ||
      !encode_bf16_2d(&p.tmap_w_up, q.w_up, E * I, H, Tiles::kHalfN, message, message_len, "w_up") ||
      !encode_bf16_2d(&p.tmap_w_down, q.w_down, E * H, I, Tiles::kBlockN, message, message_len, "w_down")) {
    return 1;
  }
  // y: one consumer warpgroup's 64 rows of a 64-column half per store (combine.cuh, store_down_block_tma).
  const uint64_t y_rows_total = static_cast<uint64_t>(q.num_ranks) * static_cast<uint64_t>(q.capacity);
  if (down_tma && !encode_bf16_2d(&p.tmap_y, q.y, y_rows_total, H, 64, message, message_len, "y")) return 1;

  // ---- launch: reset, then the persistent kernel ----
  int device = 0, num_sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return fail(message, message_len, "could not query the current device");
  }
  int grid = q.num_ctas > 0 ? q.num_ctas : num_sms;
  if (q.clusters) {
    grid -= grid % 2;  // whole clusters of 2
    if (grid < 2) return fail(message, message_len, "clusters need at least 2 CTAs, got num_ctas=%d", q.num_ctas);
  }
  // D(0) in parts (scheduler.cuh): by default enough parts per tile that every CTA gets one (the first minibatch
  // counted full: the host does not know the ranks' used tiles, which the kernel reads from the schedule tables).
  if (q.gather_x) {
    p.first_dispatch_parts = 1;  // no dispatch tasks
  } else if (q.first_dispatch_parts > 0) {
    p.first_dispatch_parts = q.first_dispatch_parts;
  } else {
    const int first_tiles = own_ranks * (q.minibatch_rows / Tiles::kBlockM);
    const int parts = grid / (first_tiles > 0 ? first_tiles : 1);
    constexpr int kMaxParts = Tiles::kMaxFirstDispatchParts;
    p.first_dispatch_parts = parts < 1 ? 1 : (parts > kMaxParts ? kMaxParts : parts);
  }
  const int smem = shared_storage_bytes<Tiles>();

  const int reset_blocks = ceil_div(p.ctr.total, 256) < 1024 ? ceil_div(p.ctr.total, 256) : 1024;
  sm90_moe_reset_kernel<<<reset_blocks, 256, 0, stream>>>(q.counters, p.ctr.total, q.error, kErrorWords);

  // The ping-pong down task has its own instantiation: its register split would cost the others (RegisterSplit).
  // So do clusters: their scheduler and pair loads stay out of the other kernels.
  auto kernel = q.variant != Sm90Variant::kPipelined ? sm90_moe_forward_kernel<Tiles, false, false>
                : q.down_ping_pong                   ? sm90_moe_forward_kernel<Tiles, true, true>
                : q.clusters                         ? sm90_moe_forward_kernel<Tiles, true, false, true>
                                                     : sm90_moe_forward_kernel<Tiles, true, false>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err != cudaSuccess)
    return fail(message, message_len, "cudaFuncSetAttribute(max dynamic smem = %d) failed: %s", smem,
                cudaGetErrorString(err));
  if (q.clusters) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(Tiles::kNumThreads);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = 2;
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    static int max_clusters = -1;  // asked once per process (one device kind; the kernel never changes)
    if (max_clusters < 0) {
      err = cudaOccupancyMaxActiveClusters(&max_clusters, kernel, &config);
      if (err != cudaSuccess) {
        max_clusters = -1;
        return fail(message, message_len, "cudaOccupancyMaxActiveClusters failed: %s", cudaGetErrorString(err));
      }
    }
    if (max_clusters < 1) return fail(message, message_len, "no 2-CTA cluster of this kernel fits the device");
    err = cudaLaunchKernelEx(&config, kernel, p);
  } else {
    kernel<<<grid, Tiles::kNumThreads, smem, stream>>>(p);
    err = cudaGetLastError();
  }
  if (err != cudaSuccess) return fail(message, message_len, "kernel launch failed: %s", cudaGetErrorString(err));
  if (q.sum_kernel && !(q.ablate & kAblateCombine)) {  // (the timing ablation skips the sum, as it skips the tasks)
    sm90_moe_sum_kernel<<<dim3(ceil_div(q.tokens_per_rank, kSumTokens), q.num_ranks), kSumThreads, 0, stream>>>(p);
    err = cudaGetLastError();
    if (err != cudaSuccess) return fail(message, message_len, "sum kernel launch failed: %s", cudaGetErrorString(err));
  }
  return 0;
}

}  // namespace mok::sm90
