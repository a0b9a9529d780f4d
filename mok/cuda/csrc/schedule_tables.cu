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

// Pass 1 (one CTA): where each expert's run starts in the sorted order, then every rank's padded offsets.
__global__ void __launch_bounds__(kOffsetsThreads)
    schedule_offsets_kernel(const int* expert_sorted, int num_slots, int num_experts, int num_ranks, int tile,
                            int* run_start, int* segment_offsets) {
  for (int e = threadIdx.x; e <= num_experts; e += blockDim.x) {
    run_start[e] = lower_bound_i32(expert_sorted, num_slots, e);
  }
  __syncthreads();  // run_start (global memory, this CTA only) complete
  const int local_experts = num_experts / num_ranks;
  for (int r = threadIdx.x; r < num_ranks; r += blockDim.x) {
    rank_segment_offsets(run_start, r, local_experts, tile, segment_offsets + r * (local_experts + 1));
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

}  // namespace

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
                                                            q.num_ranks, q.tile, q.run_start, q.segment_offsets);
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
