// TMA (cp.async.bulk.tensor): 2-D loads into shared memory, completing on an mbarrier, and 2-D stores from shared
// memory in bulk groups, with their waits.
//
// The tensor maps are encoded on the host (csrc/sm90_moe_forward.cu) with 128-byte swizzle and a box whose
// inner side is 64 bf16 (128 bytes), so a box of R rows lands as R/8 swizzle atoms of 1024 bytes: exactly
// the K-major SW128 layout wgmma's shared-memory descriptors describe (gemm_mainloop.cuh).
#pragma once

#include <cuda.h>
#include <cstdint>

#include "sync.cuh"

namespace mok::sm90 {

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Load the box whose first element is (inner = col, outer = row) into `dst` (1024-byte aligned); the
// mbarrier's transaction count drops by the box's full byte size (out-of-bounds elements are zero-filled
// and still counted).
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int col, int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(col), "r"(row)
      : "memory");
}

// tma_load_2d into every CTA of the cluster in `cta_mask`: the box lands at the same shared-memory offset in each, and
// completes on the mbarrier at `bar`'s offset in each.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int col,
                                                      int row, uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;"
      ::"r"(smem_addr(dst)), "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(col), "r"(row),
        "h"(cta_mask)
      : "memory");
}

// Store the box whose first element is (inner = col, outer = row) from `src` (1024-byte aligned, in the map's
// swizzle) to global memory; out-of-bounds elements are not written. Completes asynchronously, in a bulk group.
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int col, int row) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(src)), "r"(col), "r"(row)
               : "memory");
}

__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }

// Every committed bulk group of this thread has read its shared memory source (it may be rewritten).
__device__ __forceinline__ void bulk_wait_group_read_all() {
  asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
}

// Every committed bulk group of this thread is complete: its global writes are performed.
__device__ __forceinline__ void bulk_wait_group_all() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

}  // namespace mok::sm90
