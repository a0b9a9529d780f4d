// The schedule tables of mok/schedule.py, computed on the device from the routing sorted by expert.
//
// Input: the slots (token * K + k, in global token order) stably sorted by expert id, i.e. `expert_sorted[i]`
// ascending and `slot_sorted[i]` the slot it came from (torch.sort(..., stable=True) gives both). Output, for R
// ranks of E/R local experts and `capacity` rows per rank (all int32):
//   segment_offsets [R, E/R + 1]  start row of each local expert's segment, padded to `tile`; last = rows used
//   src_rank, src_slot [R, capacity]  the (source rank, slot on the source) of every row; -1 on padding
//   tile_expert [R, capacity / tile]  local expert of each tile; -1 past the last segment
// exactly mok.schedule.build_schedule's tables (tests compare them bit for bit), in two passes:
//   1. offsets (one CTA): run_start[e] = first sorted index of expert e (a binary search), then per rank the
//      prefix sum of the padded run lengths;
//   2. rows (one thread per table row): the row's segment (binary search over the segment ends), its place in
//      the segment, and, if that place holds a slot, the slot from the sorted order. Every row is written once,
//      so there is no fill-then-scatter ordering to get right and nothing depends on thread timing.
// The functions below are __host__ __device__ so a CPU test replays them against build_schedule.
#pragma once

#include <cstdint>

namespace mok::sm90 {

// First index i in [0, n) with a[i] >= value (n if none); `a` ascending.
__host__ __device__ inline int lower_bound_i32(const int* a, int n, int value) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (a[mid] < value) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// Number of entries of a[0, n) that are <= value (torch.searchsorted(..., right=True)); `a` ascending.
__host__ __device__ inline int upper_bound_i32(const int* a, int n, int value) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (a[mid] <= value) lo = mid + 1; else hi = mid;
  }
  return lo;
}

// Pass 1b for one rank: segment_offsets[rank] from run_start ([E + 1]: run_start[E] = N).
__host__ __device__ inline void rank_segment_offsets(const int* run_start, int rank, int local_experts, int tile,
                                                     int* offsets /* [local_experts + 1] */) {
  int at = 0;
  offsets[0] = 0;
  for (int l = 0; l < local_experts; ++l) {
    const int e = rank * local_experts + l;
    const int count = run_start[e + 1] - run_start[e];
    at += (count + tile - 1) / tile * tile;
    offsets[l + 1] = at;
  }
}

struct ScheduleRow {
  int src_rank;
  int src_slot;
  int tile_expert;  // the row's local expert (-1 past the last segment); meaningful for a tile's first row
};

// Pass 2 for row `row` of rank `rank`.
__host__ __device__ inline ScheduleRow schedule_row(const int* run_start, const int64_t* slot_sorted,
                                                    const int* offsets /* this rank's [L + 1] */, int rank,
                                                    int local_experts, int row, int slots_per_rank) {
  ScheduleRow out{-1, -1, -1};
  if (row >= offsets[local_experts]) return out;
  const int local = upper_bound_i32(offsets + 1, local_experts, row);  // segments ending at or before the row
  out.tile_expert = local;
  const int e = rank * local_experts + local;
  const int position = row - offsets[local];
  if (position < run_start[e + 1] - run_start[e]) {
    const int64_t slot = slot_sorted[run_start[e] + position];
    out.src_rank = static_cast<int>(slot / slots_per_rank);
    out.src_slot = static_cast<int>(slot % slots_per_rank);
  }
  return out;
}

}  // namespace mok::sm90
