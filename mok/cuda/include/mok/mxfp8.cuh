// MXFP8 on the device: E4M3 elements with one E8M0 scale per 32 (OCP MX v1.0), exactly as mok.mxfp8 quantizes
// and dequantizes (mok/triton_ref/mxfp8_quant.py spells the rules out).
//
// Hopper has no block-scaled MMA, and FP8 wgmma with per-32 promotion would not compute the same sums, so the
// megakernel keeps bf16 wgmma and moves MXFP8 only where bytes cross ranks:
//   * token rows travel packed (mok/triton_ref/mxfp8_rows.py: H code bytes, H/32 scale bytes, pad to 16), and
//     dispatch dequantizes them into the bf16 ring (dispatch.cuh): H + H/32 bytes pulled per row instead of 2H;
//   * the gate/up epilogue rounds h through MXFP8 (quantize, then dequantize: the values the down GEMM of
//     mok.triton_ref.mxfp8_gemm multiplies) before it goes to the ring (swiglu_epilogue.cuh);
//   * the expert weights arrive already dequantized (bf16, exact), made once per weight version on the host.
// Dequantization is exact (an E4M3 value times a power of two is a bf16 value, but for blocks with scale
// byte < 3, where bf16 subnormals round, as in mok.mxfp8.dequantize), so every GEMM computes
// "dequantize, then multiply in bf16 with fp32 accumulation", the contract of precision="mxfp8".
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cstdint>

namespace mok::sm90 {

constexpr int kMxBlock = 32;  // elements per E8M0 scale

// 2^(s - 127) for an E8M0 byte: a normal fp32 for s in [1, 254], the subnormal 2^-127 for s = 0, NaN for 255.
__device__ __forceinline__ float e8m0_to_float(uint32_t s) {
  if (s == 255u) return __uint_as_float(0x7FC00000u);
  return s == 0u ? __uint_as_float(0x00400000u) : __uint_as_float(s << 23);
}

// Two E4M3 codes (the first in the low byte) as fp32: exact (every E4M3 value is an fp16 value); code 0x7F/0xFF is NaN.
__device__ __forceinline__ float2 e4m3x2_to_float2(uint32_t two_codes) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two_codes & 0xFFFFu), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// 16 codes (one 16-byte chunk of a packed row) times their block's scale, rounded to bf16 (fp32 product, then
// round to nearest even: mok.mxfp8.dequantize's arithmetic), as two 16-byte chunks of bf16 in element order.
__device__ __forceinline__ void dequantize_e4m3x16(const uint4& codes, float scale, uint4& first, uint4& second) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
  uint32_t out[8];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float2 v = e4m3x2_to_float2(words[w] >> (16 * half));
      const __nv_bfloat162 pair = __floats2bfloat162_rn(__fmul_rn(v.x, scale), __fmul_rn(v.y, scale));
      out[2 * w + half] = *reinterpret_cast<const uint32_t*>(&pair);
    }
  }
  first = make_uint4(out[0], out[1], out[2], out[3]);
  second = make_uint4(out[4], out[5], out[6], out[7]);
}

// The block exponent e = ceil(log2(amax / 448)) from the bits of amax (>= 0, finite), clamped to >= -127:
// amax = 1.m * 2^p gives e = p - 8, plus one when 1.m > 1.75 (mok.triton_ref.mxfp8_quant.mx_scale_exponent).
__device__ __forceinline__ int mx_scale_exponent(float amax) {
  const uint32_t bits = __float_as_uint(amax);
  const int e = static_cast<int>((bits >> 23) & 0xFFu) - (127 + 8) + ((bits & 0x7FFFFFu) > 0x600000u ? 1 : 0);
  return max(e, -127);
}

// What quantizing with block exponent e and dequantizing does to two elements of the block: v * 2^-e (exact),
// rounded to E4M3 (nearest even; |v * 2^-e| <= 448 by the choice of e, so saturation never acts), times 2^e.
// Non-finite elements become the NaN code, so NaN.
__device__ __forceinline__ float2 mx_round_trip(float a, float b, int e) {
  const float inverse = __uint_as_float(static_cast<uint32_t>(127 - e) << 23);  // 2^-e: normal for e in [-127, 120]
  const float scale = e8m0_to_float(static_cast<uint32_t>(e + 127));
  const __nv_fp8x2_storage_t codes =
      __nv_cvt_float2_to_fp8x2(make_float2(__fmul_rn(a, inverse), __fmul_rn(b, inverse)), __NV_SATFINITE, __NV_E4M3);
  const float2 v = e4m3x2_to_float2(codes);
  const float nan = __uint_as_float(0x7FC00000u);
  return make_float2(isfinite(a) ? __fmul_rn(v.x, scale) : nan, isfinite(b) ? __fmul_rn(v.y, scale) : nan);
}

// |v| if finite, else 0: non-finite elements do not take part in their block's amax.
__device__ __forceinline__ float mx_magnitude(float v) { return isfinite(v) ? fabsf(v) : 0.0f; }

}  // namespace mok::sm90
