// The router's top-k on Hopper: each token's top_k highest fp32 logits, equal logits to the lower expert id, and their
// weights, one warp per token row. The same ids and the same weight bits as the Triton kernel
// (mok/triton_ref/router_topk.py, router_topk_kernel), which stays the reference; tests/test_router_topk_cuda.py checks
// them bit for bit.
//
// Why a second kernel: the Triton kernel takes each round's maximum over the whole row (a float maximum, then an int
// minimum for the tie rule), top_k times: 114 us of a 7.5 ms layer at anchor-2 (32,768 x 256, top-16; round 32's
// profile). Here each lane first sorts its own handful of logits (columns lane, lane + 32, ...), so a round only
// compares the 32 lanes' heads: two warp reductions of one register (redux.sync) and, in the winning lane, one
// shared-memory load of its next key.
//
// The keys: an fp32 logit's bits made to order like the float as an unsigned int (negative values' bits inverted,
// positive values' sign bit set; -0.0 taken as +0.0, since the two compare equal and so tie), 0 for a padding column
// (below every real key: -inf's is 0x007FFFFF; NaN is not allowed). A round takes the largest head key, then the
// lowest column among the lanes holding it: exactly the Triton kernel's "maximum, then lowest column holding it".
//
// The weights, from the chosen logits in lanes 0..top_k-1, with the Triton kernel's instructions (its PTX, triton
// 3.6 and 3.9): exp(x) is ex2.approx.f32(x * log2e) and a / b is div.full.f32; the renormalisation sums the scores
// in slot order (chosen_weights sums them so too, whatever its tensors' layout).
#include <cuda_runtime.h>

#include <cstdint>

#include "mok/host_error.cuh"
#include "mok/launch.cuh"

namespace mok::sm90 {
namespace {

constexpr int kTopkWarps = 8;  // token rows per CTA of 256 threads

__device__ __forceinline__ uint32_t ordered_key(float value) {
  const uint32_t bits = __float_as_uint(value == 0.0f ? 0.0f : value);
  return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// Triton's tl.exp on fp32 (ex2 of x * log2e, log2e rounded to 0x3FB8AA3B) and its fp32 division.
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float div_full(float a, float b) {
  float q;
  asm("div.full.f32 %0, %1, %2;" : "=f"(q) : "f"(a), "f"(b));
  return q;
}

__device__ __forceinline__ float triton_exp(float x) { return ex2_approx(__fmul_rn(x, __uint_as_float(0x3FB8AA3Bu))); }

// kV keys per lane (columns lane + 32 j): rows of up to 32 kV experts.
template <int kV>
__global__ void __launch_bounds__(32 * kTopkWarps) router_topk_kernel(const float* __restrict__ logits,
                                                                      int64_t stride, int num_tokens, int num_experts,
                                                                      int top_k, int weighting, int32_t* __restrict__ ids,
                                                                      float* __restrict__ weights) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kTopkWarps + (threadIdx.x >> 5);
  if (row >= num_tokens) return;  // the whole warp leaves together
  const float* in = logits + row * stride;

  uint32_t key[kV];
  int col[kV];
#pragma unroll
  for (int j = 0; j < kV; ++j) {
    col[j] = lane + 32 * j;
    key[j] = col[j] < num_experts ? ordered_key(__ldg(in + col[j])) : 0u;
  }
  // Descending by key. An odd-even transposition network that swaps only a strictly smaller key backwards is stable,
  // and the columns start ascending: equal keys stay lowest column first.
#pragma unroll
  for (int pass = 0; pass < kV; ++pass) {
#pragma unroll
    for (int j = pass & 1; j + 1 < kV; j += 2) {
      if (key[j] < key[j + 1]) {
        const uint32_t k = key[j];
        key[j] = key[j + 1];
        key[j + 1] = k;
        const int c = col[j];
        col[j] = col[j + 1];
        col[j + 1] = c;
      }
    }
  }

  // The sorted keys go to shared memory, [key index][lane] (conflict-free), and each lane keeps only its head in
  // registers: popping a head is then one shared load in the winning lane instead of a shift of 2 kV registers in
  // every lane (SIMT pays for the shift in all 32), which was about half of each round's instructions.
  __shared__ uint2 sorted[kTopkWarps][kV][32];  // (key, column)
  const int warp = threadIdx.x >> 5;
#pragma unroll
  for (int j = 1; j < kV; ++j) sorted[warp][j][lane] = make_uint2(key[j], static_cast<uint32_t>(col[j]));
  __syncwarp();
  uint32_t head_key = key[0];
  uint32_t head_col = static_cast<uint32_t>(col[0]);
  int popped = 0;  // keys of this lane chosen so far

  // Round r: the largest head, then the lowest column holding it; its lane moves to its next key (0 when it has
  // none left, below every real key). Lane r keeps round r's choice (top_k <= 32).
  uint32_t chosen_key = 0u;
  int chosen_col = 0;
  for (int r = 0; r < top_k; ++r) {
    const uint32_t best = __reduce_max_sync(0xFFFFFFFFu, head_key);
    const uint32_t choice = __reduce_min_sync(0xFFFFFFFFu, head_key == best ? head_col : 0xFFFFFFFFu);
    if (lane == r) {
      chosen_key = best;
      chosen_col = static_cast<int>(choice);
    }
    if (head_col == choice) {
      ++popped;
      const uint2 next = popped < kV ? sorted[warp][popped][lane] : make_uint2(0u, 0xFFFFFFFFu);
      head_key = next.x;
      head_col = next.y;
    }
  }

  const bool mine = lane < top_k;
  const float value = key_value(chosen_key);
  float score = 0.0f;
  if (weighting != kTopkIdsOnly) {
    if (weighting == kTopkSigmoid || weighting == kTopkSigmoidRenormalized) {
      score = div_full(1.0f, __fadd_rn(ex2_approx(__fmul_rn(value, __uint_as_float(0xBFB8AA3Bu))), 1.0f));
    } else {  // softmax over the chosen logits: the first is the row's maximum
      score = triton_exp(__fsub_rn(value, __shfl_sync(0xFFFFFFFFu, value, 0)));
    }
    if (weighting != kTopkSigmoid) {
      float total = 0.0f;
      for (int j = 0; j < top_k; ++j) total = __fadd_rn(total, __shfl_sync(0xFFFFFFFFu, score, j));
      score = div_full(score, total);
    }
  }
  if (mine) {
    ids[row * top_k + lane] = chosen_col;
    if (weighting != kTopkIdsOnly) weights[row * top_k + lane] = score;
  }
}

template <int kV>
void launch_router_topk(const float* logits, int64_t stride, int num_tokens, int num_experts, int top_k, int weighting,
                        int32_t* ids, float* weights, cudaStream_t stream) {
  const int ctas = (num_tokens + kTopkWarps - 1) / kTopkWarps;
  router_topk_kernel<kV><<<ctas, 32 * kTopkWarps, 0, stream>>>(logits, stride, num_tokens, num_experts, top_k,
                                                                weighting, ids, weights);
}

}  // namespace

int sm90_router_topk(const float* logits, int64_t stride, int num_tokens, int num_experts, int top_k, int weighting,
                     int32_t* ids, float* weights, cudaStream_t stream, char* message, size_t message_len) {
  if (num_experts < 1 || num_experts > kRouterTopkMaxExperts || top_k < 1 || top_k > kRouterTopkMaxK ||
      top_k > num_experts) {
    return fail(message, message_len, "router_topk: needs 1 <= top_k <= min(%d, experts) and 1..%d experts, got top_k %d "
                "and %d experts", kRouterTopkMaxK, kRouterTopkMaxExperts, top_k, num_experts);
  }
  if (weighting < kTopkIdsOnly || weighting > kTopkSigmoidRenormalized) {
    return fail(message, message_len, "router_topk: unknown weighting %d", weighting);
  }
  if (num_tokens <= 0) return 0;
  const int per_lane = (num_experts + 31) / 32;
  if (per_lane <= 1) {
    launch_router_topk<1>(logits, stride, num_tokens, num_experts, top_k, weighting, ids, weights, stream);
  } else if (per_lane <= 2) {
    launch_router_topk<2>(logits, stride, num_tokens, num_experts, top_k, weighting, ids, weights, stream);
  } else if (per_lane <= 4) {
    launch_router_topk<4>(logits, stride, num_tokens, num_experts, top_k, weighting, ids, weights, stream);
  } else if (per_lane <= 8) {
    launch_router_topk<8>(logits, stride, num_tokens, num_experts, top_k, weighting, ids, weights, stream);
  } else if (per_lane <= 12) {
    launch_router_topk<12>(logits, stride, num_tokens, num_experts, top_k, weighting, ids, weights, stream);
  } else {
    launch_router_topk<16>(logits, stride, num_tokens, num_experts, top_k, weighting, ids, weights, stream);
  }
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(message, message_len, "router_topk launch: %s", cudaGetErrorString(err));
  return 0;
}

}  // namespace mok::sm90
