// What does the gate/up epilogue's SwiGLU cost per element on one SM, and which instructions set that cost?
//
// Round 39 measured the epilogue of anchor-2's gate/up task at 4.9 us (task timeline), about 2.6 us of it SwiGLU
// and staging. For each element the kernel's swiglu() (mok/swiglu_epilogue.cuh) then ran two MUFU operations (ex2,
// rcp) and, in its SASS, two F2F.BF16.F32 conversions (gate and up rounded to bf16 one at a time). If conversions
// run at the MUFU's rate, that is four slow-pipe operations per element. Round 39's swiglu_packed_rounding.patch
// rounds the pair with one F2FP instead; round 40 measured it (3.89 -> 7.13 results/clk/SM here; the kernel alone
// 0.983-0.997x the time at six shapes) and adopted it. This probe times each piece alone and both SwiGLU forms, with
// no loads and no stores:
//
//   ffma            x = x * a + b                                   the FMA pipe, for scale
//   f2f             x = float(bf16_rn(x)) * a + b                   one F2F.BF16.F32 per result
//   f2fp            (x, y) = float2(bf16x2_rn(x, y)) * a + b        one F2FP per two results
//   ex2             x = ex2.approx(-x) * a + b                      one MUFU.EX2 per result
//   rcp             x = rcp.approx(x) * a + b                       one MUFU.RCP per result
//   swiglu          g = swiglu(g, g / 2 + u0) * a + b               swiglu() before round 40 (two F2F)
//   swiglu-packed   the same with gate and up rounded by one F2FP   the kernel's swiglu() since round 40
//
// Every thread runs kChains independent chains (enough to cover the pipes' latency); 132 x kBlocksPerSm CTAs of 256
// threads (the two consumer warpgroups) are resident at once, and each CTA times itself with clock64. The result is
// results per clock per SM, and the cycles one SM needs for a gate/up tile's 16,384 elements (128 rows x 128 h
// columns): what the epilogue's SwiGLU costs per task at that rate.
//
// Build and run (H200):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I mok/cuda/include \
//     -o build/swiglu_epilogue_probe experiments/swiglu_epilogue_probe.cu
//   build/swiglu_epilogue_probe [iterations (4096) [runs (7)]]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mok/swiglu_epilogue.cuh"  // the kernel's swiglu() and round_pair_to_bf16()
#include "sm90_probe_util.cuh"        // PROBE_CHECK

namespace probe {

constexpr int kThreads = 256;     // the megakernel's two consumer warpgroups
constexpr int kBlocksPerSm = 4;   // 32 warps per SM: the pipes, not the issue of one CTA, set the rate
constexpr int kChains = 8;        // independent chains per thread
constexpr int kTileElements = 128 * 128;  // SwiGLU results of one gate/up tile

enum Mode { kFfma, kF2f, kF2fp, kEx2, kRcp, kSwiglu, kSwigluPacked, kNumModes };
const char* kNames[] = {"ffma", "f2f", "f2fp", "ex2", "rcp", "swiglu", "swiglu-packed"};

__device__ __forceinline__ float ex2_approx(float v) {
  float r;
  asm volatile("ex2.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

__device__ __forceinline__ float rcp_approx(float v) {
  float r;
  asm volatile("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// The rounding as the kernel did it before round 40: one F2F.BF16.F32 per value.
__device__ __forceinline__ float round_to_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// swiglu() before round 40: gate and up rounded to bf16 one at a time (two F2F per element).
__device__ __forceinline__ float swiglu_two_f2f(float gate_acc, float up_acc) {
  const float gate = round_to_bf16(gate_acc);
  const float up = round_to_bf16(up_acc);
  const float sigmoid = __fdividef(1.0f, 1.0f + __expf(-gate));
  return (gate * sigmoid) * up;
}

// The chains keep their values in a small range (|x| < 4), so no special case (inf, denormal) runs. Results per
// thread per iteration: kChains for every mode.
template <Mode kMode>
__global__ void __launch_bounds__(kThreads) throughput_kernel(int iterations, float a, float b,
                                                              long long* cycles, float* sink) {
  float x[kChains], y[kChains];
#pragma unroll
  for (int c = 0; c < kChains; ++c) {
    x[c] = 0.25f + 0.01f * c + 1e-4f * threadIdx.x;
    y[c] = 0.75f - 0.01f * c;
  }
  __syncthreads();
  const long long start = clock64();
  for (int it = 0; it < iterations; ++it) {
    if constexpr (kMode == kF2fp) {  // two results per packed conversion: chains in pairs
#pragma unroll
      for (int c = 0; c < kChains; c += 2) {
        const float2 rounded = mok::sm90::round_pair_to_bf16(x[c], x[c + 1]);  // the kernel's packed rounding
        x[c] = fmaf(rounded.x, a, b);
        x[c + 1] = fmaf(rounded.y, a, b);
      }
    } else {
#pragma unroll
      for (int c = 0; c < kChains; ++c) {
        if constexpr (kMode == kFfma) x[c] = fmaf(x[c], a, b);
        if constexpr (kMode == kF2f) x[c] = fmaf(round_to_bf16(x[c]), a, b);
        if constexpr (kMode == kEx2) x[c] = fmaf(ex2_approx(-x[c]), a, b);
        if constexpr (kMode == kRcp) x[c] = fmaf(rcp_approx(x[c] + 2.0f), a, b);
        // up follows the chain too, or the compiler rounds a loop-invariant up once, outside the loop
        if constexpr (kMode == kSwiglu) x[c] = fmaf(swiglu_two_f2f(x[c], fmaf(x[c], 0.5f, y[c])), a, b);
        if constexpr (kMode == kSwigluPacked) x[c] = fmaf(mok::sm90::swiglu(x[c], fmaf(x[c], 0.5f, y[c])), a, b);
      }
    }
  }
  __syncthreads();
  const long long end = clock64();
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c) sum += x[c];
  if (sum == 12345.678f) sink[threadIdx.x] = sum;  // keeps the chains alive; never true
  if (threadIdx.x == 0) cycles[blockIdx.x] = end - start;
}

using Kernel = void (*)(int, float, float, long long*, float*);
const Kernel kKernels[] = {throughput_kernel<kFfma>, throughput_kernel<kF2f>, throughput_kernel<kF2fp>,
                           throughput_kernel<kEx2>, throughput_kernel<kRcp>, throughput_kernel<kSwiglu>,
                           throughput_kernel<kSwigluPacked>};

}  // namespace probe

int main(int argc, char** argv) {
  using namespace probe;
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 4096;
  const int runs = argc > 2 ? std::atoi(argv[2]) : 7;
  int sms = 0;
  PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int blocks = sms * kBlocksPerSm;
  long long* cycles = nullptr;
  float* sink = nullptr;
  PROBE_CHECK(cudaMalloc(&cycles, blocks * sizeof(long long)));
  PROBE_CHECK(cudaMalloc(&sink, kThreads * sizeof(float)));
  // a = 0.5, b = 0.25: every chain's map contracts toward a fixed point in (0, 1) (ex2 of -x, rcp of x + 2).
  std::vector<std::vector<double>> per_mode(kNumModes);
  for (int run = 0; run < runs; ++run) {
    for (int m = 0; m < kNumModes; ++m) {  // modes interleaved, so drift spreads over all of them
      kKernels[m]<<<blocks, kThreads>>>(iterations, 0.5f, 0.25f, cycles, sink);
      PROBE_CHECK(cudaGetLastError());
      PROBE_CHECK(cudaDeviceSynchronize());
      std::vector<long long> host(blocks);
      PROBE_CHECK(cudaMemcpy(host.data(), cycles, blocks * sizeof(long long), cudaMemcpyDeviceToHost));
      // All CTAs are resident together, so an SM's kBlocksPerSm CTAs share its pipes for the longest one's cycles.
      const long long longest = *std::max_element(host.begin(), host.end());
      const double results = static_cast<double>(iterations) * kChains * kThreads * kBlocksPerSm;
      per_mode[m].push_back(results / static_cast<double>(longest));
    }
  }
  std::printf("%d CTAs of %d threads (%d per SM), %d iterations x %d chains; median of %d runs, modes interleaved\n",
              blocks, kThreads, kBlocksPerSm, iterations, kChains, runs);
  std::printf("%-15s %18s %24s\n", "mode", "results/clk/SM", "cycles per 16,384 results");
  for (int m = 0; m < kNumModes; ++m) {
    std::vector<double> v = per_mode[m];
    std::sort(v.begin(), v.end());
    const double rate = v[v.size() / 2];
    std::printf("%-15s %18.2f %24.0f\n", kNames[m], rate, kTileElements / rate);
  }
  PROBE_CHECK(cudaFree(cycles));
  PROBE_CHECK(cudaFree(sink));
  return 0;
}
