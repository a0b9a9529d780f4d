// Device build of the schedule tables (include/mok/schedule_tables.cuh): two small kernels after the sort.
// No torch here; csrc/binding.cpp allocates the tensors and calls sm90_schedule_tables().
#include <cuda_runtime.h>

#include <cstdint>

#include "mok/host_error.cuh"
#include "mok/launch.cuh"
#include "mok/schedule_tables.cuh"

namespace mok::sm90 {
namespace {

constexpr int kOffsetsThreads = 1024;
constexpr int kRowsThreads = 256;

// rank_segment_offsets (schedule_tables.cuh) by one warp: 32 local experts per step, their padded run lengths
// scanned by shuffles, the step's total carried to the next. One thread walking a rank's experts made one dependent
// load-and-store per expert: 11.7 us for anchor-1's one rank of 128 experts (round 24's profile).
__device__ __forceinline__ void warp_segment_offsets(const int* run_start, int rank, int local_experts, int tile,
                                                     int lane, int* offsets /* [local_experts + 1] */) {
  int at = 0;  // rows of the segments before this step's
  if (lane == 0) offsets[0] = 0;
  for (int l0 = 0; l0 < local_experts; l0 += 32) {
    const int l = l0 + lane;
    int padded = 0;
    if (l < local_experts) {
      const int e = rank * local_experts + l;
      padded = (run_start[e + 1] - run_start[e] + tile - 1) / tile * tile;
    }
    int inclusive = padded;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const int other = __shfl_up_sync(0xFFFFFFFFu, inclusive, d);
      if (lane >= d) inclusive += other;
    }
    if (l < local_experts) offsets[l + 1] = at + inclusive;
    at += __shfl_sync(0xFFFFFFFFu, inclusive, 31);
  }
}

// Pass 1 (one CTA): where each expert's run starts in the sorted order (a binary search per expert, unless the
// counting sort wrote them), then every rank's padded offsets, a warp per rank.
__global__ void __launch_bounds__(kOffsetsThreads)
    schedule_offsets_kernel(const int* expert_sorted, int num_slots, int num_experts, int num_ranks, int tile,
                            bool run_start_given, int* run_start, int* segment_offsets) {
  if (!run_start_given) {
    for (int e = threadIdx.x; e <= num_experts; e += blockDim.x) {
      run_start[e] = lower_bound_i32(expert_sorted, num_slots, e);
    }
    __syncthreads();  // run_start (global memory, this CTA only) complete
  }
  const int local_experts = num_experts / num_ranks;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < num_ranks; r += kOffsetsThreads / 32) {
    warp_segment_offsets(run_start, r, local_experts, tile, lane, segment_offsets + r * (local_experts + 1));
  }
}

// Pass 2: one thread per table row (all ranks).
__global__ void __launch_bounds__(kRowsThreads)
    schedule_rows_kernel(const int* run_start, const int64_t* slot_sorted, const int* segment_offsets,
                         int num_experts, int num_ranks, int tile, int capacity, int slots_per_rank, int* src_rank,
                         int* src_slot, int* tile_expert) {
  const long long idx = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<long long>(num_ranks) * capacity) return;
  const int rank = static_cast<int>(idx / capacity);
  const int row = static_cast<int>(idx - static_cast<long long>(rank) * capacity);
  const int local_experts = num_experts / num_ranks;
  const ScheduleRow s = schedule_row(run_start, slot_sorted, segment_offsets + rank * (local_experts + 1), rank,
                                     local_experts, row, slots_per_rank);
  src_rank[idx] = s.src_rank;
  src_slot[idx] = s.src_slot;
  if (row % tile == 0) tile_expert[static_cast<long long>(rank) * (capacity / tile) + row / tile] = s.tile_expert;
}

// The counting sort, over G = ceil(N / kExpertSortSlotsPerCta) CTAs of kSortWarps warps, in two kernels. CTA g owns
// the contiguous slots [g * kExpertSortSlotsPerCta, (g + 1) * kExpertSortSlotsPerCta), and in it warp w owns
// kSortSlotsPerWarp contiguous slots, walked in steps of 32 (lane l: the step's slot l), held in registers.
//   expert_count_kernel: each CTA's slots per expert -> cta_counts[g][e] (global memory).
//   expert_sort_kernel: each CTA counts its warps' slots per expert again. Warp w's slots of expert e then start at
//     (the slots of every smaller expert: an exclusive scan over experts of cta_counts' column sums)
//     + (expert e's slots in CTAs before g: the column's prefix) + (in warps before w of this CTA);
//     the column sums and prefixes are read by all the CTA's threads at once (with one thread per expert walking the G
//     counts of its column, few experts over many CTAs, E = 8 over 256 CTAs say, left E threads with G loads each;
//     round 24 measured no change at the bench's shapes, which have many experts or few CTAs);
//   then each warp walks its slots again in the same order, and a slot goes to its warp's next position for its expert
//   plus the number of same-expert lanes before it in the step (lanes_with_same_expert).
// So equal experts keep slot order (stable), and every position is decided by the data alone (no atomics:
// deterministic). Round 22's version was one CTA for all slots: 16.5-17.9 us at the kimi and glm slices (round 23's
// profile), 32-40 serial steps per warp and pass; here 8. CTA 0 also writes run_start[E + 1] (the first sorted position
// of each expert, N at E), which the schedule's offsets kernel would otherwise search for.
constexpr int kSortThreads = 512;
constexpr int kSortWarps = kSortThreads / 32;
constexpr int kSortSlotsPerWarp = kExpertSortSlotsPerCta / kSortWarps;
constexpr int kSortStepsPerWarp = kSortSlotsPerWarp / 32;
static_assert(kSortSlotsPerWarp % 32 == 0, "a warp's slots are whole steps of 32");
static_assert(kSortWarps <= 32, "the scan of the expert totals uses one warp of warp sums");

__device__ __forceinline__ int warp_exclusive_scan(int value, int lane, int& warp_total) {
  int inclusive = value;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const int other = __shfl_up_sync(0xFFFFFFFFu, inclusive, d);
    if (lane >= d) inclusive += other;
  }
  warp_total = __shfl_sync(0xFFFFFFFFu, inclusive, 31);
  return inclusive - value;
}

// This warp's first slot: CTA blockIdx.x's chunk, then warp w's part of it.
__device__ __forceinline__ int warp_first_slot(int warp) {
  return static_cast<int>(blockIdx.x) * kExpertSortSlotsPerCta + warp * kSortSlotsPerWarp;
}

// The warp's slots' experts into registers (-1 past the last slot), every load issued before any is used; an id outside
// [0, E) is clamped into it.
__device__ __forceinline__ void load_warp_experts(const int* ids, int num_slots, int num_experts, int first_slot,
                                                  int lane, int (&expert)[kSortStepsPerWarp]) {
#pragma unroll
  for (int s = 0; s < kSortStepsPerWarp; ++s) {
    const int slot = first_slot + s * 32 + lane;
    expert[s] = slot < num_slots ? min(max(ids[slot], 0), num_experts - 1) : -1;
  }
}

// Bits of an expert id, with one value to spare for "no slot" (-1 is matched as E): E = 6 -> 3, E = 128 -> 8.
__device__ __forceinline__ int expert_key_bits(int num_experts) { return 32 - __clz(num_experts); }

// The lanes of the warp whose expert equals mine (what __match_any_sync(~0u, expert) gives). Past
// kMatchAnyMaxExperts by one ballot per bit of the id (a lane matches where every bit agrees): __match_any_sync's
// time grows with the distinct values in the warp, the ballots' with log2(E). Round 24's sort bench (GPU time of the
// whole sort, calls 4 and 5): ballots 19.4 / 37.3 / 15.6 us at anchors 1 / 2 / 5 (128 / 256 / 64 experts) against
// 22.7 / 40.2 / 18.7 with __match_any_sync, but 8.9-10.0 us at the slices' 4-8 experts against 7.3-9.2.
constexpr int kMatchAnyMaxExperts = 16;
__device__ __forceinline__ unsigned lanes_with_same_expert(int expert, int num_experts, int key_bits) {
  if (num_experts <= kMatchAnyMaxExperts) return __match_any_sync(0xFFFFFFFFu, expert);
  const int key = expert < 0 ? num_experts : expert;
  unsigned same = 0xFFFFFFFFu;
  for (int b = 0; b < key_bits; ++b) {
    const bool bit = (key >> b) & 1;
    const unsigned ones = __ballot_sync(0xFFFFFFFFu, bit);
    same &= bit ? ones : ~ones;
  }
  return same;
}

// Adds the warp's slots per expert to mine[E] (one lane per distinct expert of a step adds them).
__device__ __forceinline__ void count_warp_experts(const int (&expert)[kSortStepsPerWarp], int num_experts, int* mine,
                                                  int lane) {
  const unsigned lanes_before = (1u << lane) - 1u;
  const int key_bits = expert_key_bits(num_experts);
#pragma unroll
  for (int s = 0; s < kSortStepsPerWarp; ++s) {
    const unsigned same = lanes_with_same_expert(expert[s], num_experts, key_bits);
    if (expert[s] >= 0 && (same & lanes_before) == 0) mine[expert[s]] += __popc(same);
    __syncwarp();
  }
}

__global__ void __launch_bounds__(kSortThreads)
    expert_count_kernel(const int* ids, int num_slots, int num_experts, int* cta_counts) {
  extern __shared__ int sort_smem[];
  int* counts = sort_smem;  // [kSortWarps][E]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < kSortWarps * num_experts; i += kSortThreads) counts[i] = 0;
  __syncthreads();
  int expert[kSortStepsPerWarp];
  load_warp_experts(ids, num_slots, num_experts, warp_first_slot(warp), lane, expert);
  count_warp_experts(expert, num_experts, counts + warp * num_experts, lane);
  __syncthreads();
  for (int e = threadIdx.x; e < num_experts; e += kSortThreads) {
    int total = 0;
    for (int w = 0; w < kSortWarps; ++w) total += counts[w * num_experts + e];
    cta_counts[static_cast<int>(blockIdx.x) * num_experts + e] = total;
  }
}

// Adds column e of cta_counts [G][E] to column_total[e], and its rows g < blockIdx.x to column_before[e], for every e:
// all the CTA's threads over the G x E counts, coalesced, kColumnLoads loads in flight per thread before any is added.
// Shared-memory integer atomics: the sums are the same in any order.
constexpr int kColumnLoads = 4;
__device__ __forceinline__ void sum_count_columns(const int* cta_counts, int num_experts, int* column_total,
                                                  int* column_before) {
  const int cells = static_cast<int>(gridDim.x) * num_experts;
  for (int base = threadIdx.x; base < cells; base += kColumnLoads * kSortThreads) {
    int count[kColumnLoads];
#pragma unroll
    for (int j = 0; j < kColumnLoads; ++j) {
      const int i = base + j * kSortThreads;
      count[j] = i < cells ? cta_counts[i] : 0;
    }
#pragma unroll
    for (int j = 0; j < kColumnLoads; ++j) {
      const int i = base + j * kSortThreads;
      if (i >= cells || count[j] == 0) continue;
      const int g = i / num_experts, e = i - g * num_experts;
      atomicAdd(&column_total[e], count[j]);
      if (g < static_cast<int>(blockIdx.x)) atomicAdd(&column_before[e], count[j]);
    }
  }
}

__global__ void __launch_bounds__(kSortThreads)
    expert_sort_kernel(const int* ids, int num_slots, int num_experts, const int* cta_counts, int* expert_sorted,
                       int64_t* slot_sorted, int* run_start) {
  extern __shared__ int sort_smem[];
  int* next = sort_smem;                                 // [kSortWarps][E]: a count, then the next position
  int* column_total = next + kSortWarps * num_experts;   // [E]: each expert's slots in all CTAs
  int* column_before = column_total + num_experts;       // [E]: ... in the CTAs before this one
  int* warp_sums = column_before + num_experts;          // [kSortWarps + 1]: the scan of the totals, its round's sum
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < (kSortWarps + 2) * num_experts; i += kSortThreads) next[i] = 0;
  __syncthreads();
  const int first_slot = warp_first_slot(warp);
  int expert[kSortStepsPerWarp];
  load_warp_experts(ids, num_slots, num_experts, first_slot, lane, expert);
  int* mine = next + warp * num_experts;
  count_warp_experts(expert, num_experts, mine, lane);
  sum_count_columns(cta_counts, num_experts, column_total, column_before);
  __syncthreads();

  // Per expert: the slots before this CTA's and this CTA's warps' counts as exclusive prefixes over the warps; the
  // expert's total over all CTAs. Then every expert's first position (an exclusive scan of the totals over experts,
  // kSortThreads at a time) is added to its warps'.
  int carry = 0;  // positions taken by the experts of earlier rounds of the scan
  for (int e0 = 0; e0 < num_experts; e0 += kSortThreads) {
    const int e = e0 + static_cast<int>(threadIdx.x);
    int total = 0;
    if (e < num_experts) {
      total = column_total[e];
      int before = column_before[e];  // expert e's slots in the CTAs before this one
      for (int w = 0; w < kSortWarps; ++w) {
        const int count = next[w * num_experts + e];
        next[w * num_experts + e] = before;
        before += count;
      }
    }
    int warp_total;
    const int within_warp = warp_exclusive_scan(total, lane, warp_total);
    if (lane == 0) warp_sums[warp] = warp_total;
    __syncthreads();
    if (warp == 0) {
      int round_total;
      const int before = warp_exclusive_scan(lane < kSortWarps ? warp_sums[lane] : 0, lane, round_total);
      __syncwarp();
      if (lane < kSortWarps) warp_sums[lane] = before;
      if (lane == 0) warp_sums[kSortWarps] = round_total;
    }
    __syncthreads();
    if (e < num_experts) {
      const int first = carry + warp_sums[warp] + within_warp;
      for (int w = 0; w < kSortWarps; ++w) next[w * num_experts + e] += first;
      if (run_start != nullptr && blockIdx.x == 0) run_start[e] = first;
    }
    carry += warp_sums[kSortWarps];
    __syncthreads();  // warp_sums is rewritten by the next round
  }

  if (run_start != nullptr && blockIdx.x == 0 && threadIdx.x == 0) run_start[num_experts] = num_slots;

  // Pass 2: the same walk; each slot to its warp's next position for its expert, after the same-expert lanes before
  // it in the step.
  const unsigned lanes_before = (1u << lane) - 1u;
  const int key_bits = expert_key_bits(num_experts);
#pragma unroll
  for (int s = 0; s < kSortStepsPerWarp; ++s) {
    const int e = expert[s];
    const unsigned same = lanes_with_same_expert(e, num_experts, key_bits);
    if (e >= 0) {
      const int position = mine[e] + __popc(same & lanes_before);
      expert_sorted[position] = e;
      slot_sorted[position] = first_slot + s * 32 + lane;
    }
    __syncwarp();  // every lane has read mine[e] before the step's first lane moves it on
    if (e >= 0 && (same & lanes_before) == 0) mine[e] += __popc(same);
    __syncwarp();
  }
}

}  // namespace

int sm90_expert_sort(const int32_t* ids, int num_slots, int num_experts, int32_t* cta_counts, int32_t* expert_sorted,
                     int64_t* slot_sorted, int32_t* run_start, cudaStream_t stream, char* message,
                     size_t message_len) {
  if (num_slots < 1 || num_slots > kExpertSortMaxSlots || num_experts < 1 || num_experts > kExpertSortMaxExperts)
    return fail(message, message_len, "expert sort: needs 1..%d slots (got %d) and 1..%d experts (got %d)",
                kExpertSortMaxSlots, num_slots, kExpertSortMaxExperts, num_experts);
  if (ids == nullptr || cta_counts == nullptr || expert_sorted == nullptr || slot_sorted == nullptr)
    return fail(message, message_len, "expert sort: a required device pointer is null");
  const int ctas = expert_sort_ctas(num_slots);
  const int count_smem = static_cast<int>(sizeof(int)) * kSortWarps * num_experts;
  const int sort_smem = static_cast<int>(sizeof(int)) * ((kSortWarps + 2) * num_experts + kSortWarps + 1);
  // Past 48 KB both kernels opt in, always to the largest size any E needs: a limit set to this call's size could be
  // lowered by another thread's call with a smaller E between this one's setting and its launch.
  const int largest_smem =
      static_cast<int>(sizeof(int)) * ((kSortWarps + 2) * kExpertSortMaxExperts + kSortWarps + 1);
  if (sort_smem > 48 * 1024 &&
      (cudaFuncSetAttribute(expert_count_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, largest_smem) !=
           cudaSuccess ||
       cudaFuncSetAttribute(expert_sort_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, largest_smem) !=
           cudaSuccess)) {
    cudaGetLastError();  // cleared: not left for an unrelated later check to report
    return fail(message, message_len, "expert sort: %d bytes of shared memory refused", largest_smem);
  }
  expert_count_kernel<<<ctas, kSortThreads, count_smem, stream>>>(ids, num_slots, num_experts, cta_counts);
  expert_sort_kernel<<<ctas, kSortThreads, sort_smem, stream>>>(ids, num_slots, num_experts, cta_counts,
                                                                expert_sorted, slot_sorted, run_start);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(message, message_len, "expert sort: launch failed: %s", cudaGetErrorString(err));
  return 0;
}

int sm90_schedule_tables(const Sm90ScheduleProblem& q, cudaStream_t stream, char* message, size_t message_len) {
  if (q.num_slots < 1 || q.num_experts < 1 || q.num_ranks < 1 || q.num_experts % q.num_ranks != 0)
    return fail(message, message_len, "schedule tables: need slots >= 1 and experts (%d) a multiple of ranks (%d)",
                q.num_experts, q.num_ranks);
  if (q.tile < 1 || q.capacity < q.tile || q.capacity % q.tile != 0 || q.slots_per_rank < 1)
    return fail(message, message_len, "schedule tables: capacity (%d) must be a positive multiple of tile (%d)",
                q.capacity, q.tile);
  if (static_cast<long long>(q.num_ranks) * q.capacity >= (1ll << 31))
    return fail(message, message_len, "schedule tables: ranks x capacity exceeds 32-bit indexing");
  const void* required[] = {q.expert_sorted, q.slot_sorted, q.run_start, q.segment_offsets, q.src_rank,
                            q.src_slot, q.tile_expert};
  for (const void* ptr : required) {
    if (ptr == nullptr) return fail(message, message_len, "schedule tables: a required device pointer is null");
  }
  schedule_offsets_kernel<<<1, kOffsetsThreads, 0, stream>>>(q.expert_sorted, q.num_slots, q.num_experts,
                                                            q.num_ranks, q.tile, q.run_start_given, q.run_start,
                                                            q.segment_offsets);
  const long long rows = static_cast<long long>(q.num_ranks) * q.capacity;
  const int blocks = static_cast<int>((rows + kRowsThreads - 1) / kRowsThreads);
  schedule_rows_kernel<<<blocks, kRowsThreads, 0, stream>>>(q.run_start, q.slot_sorted, q.segment_offsets,
                                                           q.num_experts, q.num_ranks, q.tile, q.capacity,
                                                           q.slots_per_rank, q.src_rank, q.src_slot, q.tile_expert);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess)
    return fail(message, message_len, "schedule tables: launch failed: %s", cudaGetErrorString(err));
  return 0;
}

}  // namespace mok::sm90
