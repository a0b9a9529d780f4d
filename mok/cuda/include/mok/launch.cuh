// Host API of the SM90 MoE forward (plain C++: no device code, no torch). csrc/binding.cpp fills a
// Sm90MoeProblem from tensors; csrc/sm90_moe_forward.cu checks it, encodes the TMA descriptors, resets
// the counters in-stream and launches the persistent kernel.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mok::sm90 {

// int64 fields per ticket of the optional task timeline (Sm90MoeProblem::trace; their meaning: trace.cuh).
inline constexpr int kSm90TraceFields = 7;

enum class Sm90Variant : int {
  kSimple = 0,     // lock-step roles; the clearly-correct baseline
  kPipelined = 1,  // producer runs ahead through a task queue; overlapped wgmma
};

// Everything one forward launch needs, as raw device pointers and sizes. Shapes and dtypes are stated per
// field; "R" is the number of (emulated) ranks, T_local = tokens per rank, K = top-k, E = the experts whose
// weights this launch holds (all of the layer's; one real rank per launch: that rank's own), E_local = experts per
// rank (E / R; one real rank: E), R' = ranks whose ring and saved rows this launch holds (R; one real rank: 1).
struct Sm90MoeProblem {
  int num_ranks = 0;          // R, 1..64
  int tokens_per_rank = 0;    // T_local
  int top_k = 0;              // K
  int hidden = 0;             // H, multiple of 64
  int intermediate = 0;       // I, multiple of 64
  int num_experts = 0;        // E, multiple of R (one real rank per launch: that rank's experts)
  int capacity = 0;           // rows of each rank's schedule table, multiple of 128
  int minibatch_rows = 0;     // multiple of 128
  int ring_rows = 0;          // multiple of minibatch_rows

  const int32_t* src_rank = nullptr;         // [R, capacity]
  const int32_t* src_slot = nullptr;         // [R, capacity]
  const int32_t* tile_expert = nullptr;      // [R, capacity / 128]
  const int32_t* segment_offsets = nullptr;  // [R, E_local + 1]

  const int64_t* x_ptrs = nullptr;        // [R] -> bf16 [T_local, H]
  const int64_t* weight_ptrs = nullptr;   // [R] -> fp32 [T_local * K]
  const int64_t* combine_ptrs = nullptr;  // [R] -> bf16 [T_local * K, H]
  const int64_t* out_ptrs = nullptr;      // [R] -> bf16 [T_local, H]

  const void* w_gate = nullptr;  // bf16 [E, I, H]
  const void* w_up = nullptr;    // bf16 [E, I, H]
  const void* w_down = nullptr;  // bf16 [E, H, I]
  void* ring_x = nullptr;        // bf16 [R' * ring_rows, H]
  void* ring_h = nullptr;        // bf16 [R' * ring_rows, I]
  void* saved_gate_up = nullptr; // optional bf16 [R' * capacity, 2I]: gate | up per schedule row (for the backward)
  // Optional (down_tma; emulated ranks, top-k > 1): the down tiles leave whole by TMA into y (bf16 [R * capacity, H],
  // row = schedule row) and the weighted sum reads row y_rows[s][token * K + k] of y for source s's (token, k)
  // (int32 [R, T_local * K]; the down tasks write it in the launch) instead of the combine slots. Both or neither; the
  // store warps are then off.
  void* y = nullptr;
  int* y_rows = nullptr;
  int64_t* trace = nullptr;      // optional int64 [trace_tickets, kSm90TraceFields]: the task timeline (trace.cuh)
  int trace_tickets = 0;

  // Early combine (optional, both or neither; emulated ranks with combine tasks only): each rank's tokens sorted
  // by the step after which all their rows are pushed, so their weighted sums run during later steps
  // (scheduler.cuh; built by mok/cuda/schedule_tables.py, combine_order).
  const int32_t* combine_tokens = nullptr;   // [R, T_local] a permutation of 0..T_local-1 per rank
  const int32_t* combine_offsets = nullptr;  // [R, ceil(capacity / minibatch_rows) + 1] first block (of 16 tokens)
                                             // placed in each step, ascending; last = ceil(T_local / 16)

  int32_t* counters = nullptr;   // sm90_moe_counter_ints(...) int32 (any contents: reset in-stream)
  int32_t* error = nullptr;      // sm90_moe_error_words() int32 (reset in-stream)

  bool fuse_top1 = false;        // top_k == 1 only: the down epilogue writes `out` (no combine slots or tasks);
                                 // combine_ptrs is then never dereferenced
  int ablate = 0;                // AblateFlags (workspace.cuh): timing experiments only, results are garbage
  bool gather_x = false;         // gate/up gathers its A rows from x_ptrs (no dispatch tasks; ring_x unused but
                                 // still a valid pointer). For ranks whose tokens are local (one GPU)
  int gather_prefetch = 0;       // gather mode: K blocks ahead to prefetch token rows into L2 (0 = none)
  bool gather_row_prefetch = false;  // gather mode: whole-row bulk L2 prefetch of a tile's rows at its start
  bool mxfp8 = false;            // x_ptrs hold packed MXFP8 rows of x_row_bytes (codes, scales, pad): dispatch
                                 // dequantizes them; h is rounded through MXFP8 as the down GEMM's operand
  int x_row_bytes = 0;           // 0: 2H (bf16 rows)
  bool signal_warp = true;       // pipelined variant, ring mode: a producer warp signals finished tasks (else a
                                 // consumer thread does, and its warpgroup waits for the fence)
  bool store_warps = true;       // with the signal warp: two producer warps store half of each down tile's rows and
                                 // (bf16) each gate/up tile's h, so the consumers start the next mainloop sooner
                                 // (store_warps.cuh); not with ablate
  int down_span = 1;             // column blocks per down task (dividing ceil(H / 256)): the rows' destinations are
                                 // resolved and the task signalled once per span; > 1 needs store_warps off
  bool overlap_steps = false;    // the task order mixes each step's gate/up tasks with the previous step's down
                                 // tasks (scheduler.cuh); needs a ring of 2 or more minibatches (or the whole
                                 // schedule), not with early combine; changes no bit
  bool spread_dispatch = false;  // the task order places each step's next dispatch tasks among its gate/up tasks
                                 // (scheduler.cuh, decode_spread); ring mode (ignored in gather mode); needs a ring of
                                 // 2 or more minibatches (or the whole schedule), not with overlap_steps; changes no bit
  bool skip_padding_half = true; // pipelined variant: a GEMM tile whose rows 64..127 are all padding runs one
                                 // consumer warpgroup's MMA (Task::padding_half); changes no bit
  int first_dispatch_parts = 0;  // tasks per tile of the first minibatch's dispatch (1..8; 0: enough to give every
                                 // CTA one, scheduler.cuh); changes no bit
  bool down_ping_pong = false;   // the consumer warpgroups take turns on each down block's column halves
                                 // (run_down_task); needs down_tma, the pipelined variant without the signal warp,
                                 // and I <= 256 (the launch refuses it otherwise)
  // One real rank per launch (expert parallelism across GPUs; mok/cuda/rank_run.py). -1: all R ranks are emulated
  // in this launch (the default). r >= 0: this launch is rank r of R, one per GPU: it runs rank r's expert tasks
  // and/or the combine of rank r's own tokens (`phases`); the weights ([E_local, ...]: E is then the rank's own
  // expert count), the ring ([ring_rows, ...]) and the saved rows ([capacity, 2I]) are rank r's alone, while the
  // schedule tables and the pointer tables still cover all R ranks (x, weights, slots and out of peers).
  int local_rank = -1;
  int phases = 3;                // RankPhases (workspace.cuh): 1 expert tasks, 2 combine tasks, 3 both
  // The weighted sum as a second kernel right after the megakernel (include/mok/weighted_sum.cuh), which then runs no
  // combine tasks: emulated ranks with combine tasks (not fused top-1), no early combine. Changes no bit.
  bool sum_kernel = false;
  // 2-CTA clusters (include/mok/cluster_pairs.cuh): two gate/up row tiles of one expert and column block load their
  // weight tile once, half by each CTA, multicast to both. The pipelined variant in ring mode with the signal warp,
  // without overlap_steps or down_ping_pong (the launch refuses it otherwise); an even number of CTAs. Changes no bit.
  bool clusters = false;

  Sm90Variant variant = Sm90Variant::kSimple;
  int num_ctas = 0;              // persistent CTAs; 0 = one per SM
  double timeout_s = 10.0;       // bound of every in-kernel wait
};

// int32 words the counters block needs for these sizes.
int64_t sm90_moe_counter_ints(int num_ranks, int capacity, int minibatch_rows);

// The schedule tables on the device from the routing sorted by expert (include/mok/schedule_tables.cuh,
// csrc/schedule_tables.cu). All pointers are device memory; shapes: N slots, E experts, R ranks, C capacity.
struct Sm90ScheduleProblem {
  const int32_t* expert_sorted = nullptr;  // [N] expert ids, ascending (a stable sort of topk_ids.flatten())
  const int64_t* slot_sorted = nullptr;    // [N] the slot (token * K + k) each sorted entry came from
  int num_slots = 0;                       // N = T * K
  int num_experts = 0;                     // E, multiple of R
  int num_ranks = 0;                       // R
  int tile = 0;                            // segment padding (BLOCK_M)
  int capacity = 0;                        // C rows per rank, multiple of tile, >= any rank's rows in use
  int slots_per_rank = 0;                  // T_local * K
  int32_t* run_start = nullptr;            // [E + 1] first sorted index of each expert: scratch, or given
  bool run_start_given = false;            // run_start holds them already (the counting sort wrote them)
  int32_t* segment_offsets = nullptr;      // [R, E/R + 1] out
  int32_t* src_rank = nullptr;             // [R, C] out
  int32_t* src_slot = nullptr;             // [R, C] out
  int32_t* tile_expert = nullptr;          // [R, C / tile] out
};

// Enqueue the two table kernels on `stream` (no synchronisation). Returns 0, or nonzero with a message.
int sm90_schedule_tables(const Sm90ScheduleProblem& problem, cudaStream_t stream, char* message, size_t message_len);

// The stable sort of the routing's slots by expert that the table kernels read (what torch.sort(ids, stable=True)
// gives), as a counting sort in two kernels of expert_sort_ctas(num_slots) CTAs each, where a radix sort's passes and
// launches cost more than the work. ids [num_slots] in
// [0, num_experts) (an id outside is clamped into the range: the tables of invalid routing are not defined, but no
// write goes astray); cta_counts: int32 scratch of expert_sort_ctas(num_slots) * num_experts; run_start: nullptr, or
// int32 [num_experts + 1] out, the first sorted index of each expert (num_slots at num_experts), for the tables.
constexpr int kExpertSortMaxSlots = 1048576;  // 256 CTAs, each summing all G x E CTA counts in its second kernel
constexpr int kExpertSortMaxExperts = 1024;   // a count per warp and expert in shared memory (73,796 bytes at 1024)
constexpr int kExpertSortSlotsPerCta = 4096;  // 8 steps of 32 slots per warp of 16
inline int expert_sort_ctas(int num_slots) { return (num_slots + kExpertSortSlotsPerCta - 1) / kExpertSortSlotsPerCta; }
int sm90_expert_sort(const int32_t* ids, int num_slots, int num_experts, int32_t* cta_counts, int32_t* expert_sorted,
                     int64_t* slot_sorted, int32_t* run_start, cudaStream_t stream, char* message,
                     size_t message_len);

// The router's top-k (csrc/router_topk.cu): ids [num_tokens, top_k] int32 of each row's top_k highest fp32 logits
// (row r at logits + r * stride), equal logits to the lower expert id, in descending order, and with a weighting
// other than kTopkIdsOnly their weights [num_tokens, top_k] fp32: the same bits as mok/triton_ref/router_topk.py.
// A softmax without renormalisation (a denominator over every expert) is not here. Enqueued on `stream`.
constexpr int kRouterTopkMaxExperts = 512;  // 16 keys per lane
constexpr int kRouterTopkMaxK = 32;         // one lane per chosen expert
enum RouterTopkWeighting : int {
  kTopkIdsOnly = 0,
  kTopkSoftmaxRenormalized = 1,
  kTopkSigmoid = 2,
  kTopkSigmoidRenormalized = 3,
};
int sm90_router_topk(const float* logits, int64_t stride, int num_tokens, int num_experts, int top_k, int weighting,
                     int32_t* ids, float* weights, cudaStream_t stream, char* message, size_t message_len);

// int32 words of the error record (code, counter, rank, index, seen, expected, block, ticket).
int sm90_moe_error_words();

// Dynamic shared memory bytes per CTA (both variants).
int sm90_moe_shared_memory_bytes();

// Check, reset counters, launch on `stream`. Returns 0, or a nonzero code with a message in `message`.
// Never synchronises with the device.
int sm90_moe_forward(const Sm90MoeProblem& problem, cudaStream_t stream, char* message, size_t message_len);

}  // namespace mok::sm90
