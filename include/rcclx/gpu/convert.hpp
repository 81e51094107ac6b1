// rcclx/gpu/convert.hpp: the vendors' number-conversion instructions (fp16, bf16 pairs, FP8 pairs),
// each behind a small function; callers keep the rules that make the results match a software codec.
//
//   const float f = rcclx::gpu::half_bits_to_float(h);          // cvt.f32.f16 / v_cvt_f32_f16
//   const std::uint32_t w = rcclx::gpu::float2_to_bf16x2(lo, hi); // cvt.rn.bf16x2.f32 on sm_80+
//   if constexpr (rcclx::gpu::has_fp8_cvt_nv)                    // sm_89+ device pass
//     q = rcclx::gpu::cvt_fp8x2_satfinite<rcclx::gpu::fp8_encoding::e4m3>(a, b);
//
// fp16 and bf16 conversions exist on every pass (the software codecs of core/types.hpp on the host,
// the same bits for every non-NaN value). An FP8 conversion exists only where its has_* flag is true;
// a call anywhere else fails to compile, so a caller tests the flag with `if constexpr` in a template.
#pragma once

#include <cstdint>

#include "../core/types.hpp"
#include "vendor.hpp"

#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE && defined(__has_builtin)
#  if __has_builtin(__builtin_amdgcn_cvt_pk_fp8_f32) && __has_builtin(__builtin_amdgcn_cvt_pk_f32_fp8)
#    define RCCLX_DETAIL_GPU_AMD_FP8_CVT 1
#  endif
#endif
#ifndef RCCLX_DETAIL_GPU_AMD_FP8_CVT
#  define RCCLX_DETAIL_GPU_AMD_FP8_CVT 0
#endif
#define RCCLX_DETAIL_GPU_NV_FP8_CVT (RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE && RCCLX_CUDA_ARCH >= 890)
#define RCCLX_DETAIL_GPU_NV_BF16X2_CVT (RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE && RCCLX_CUDA_ARCH >= 800)

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// a * b rounded once to fp32, never contracted with a following add into a fused multiply-add (the
// compilers for CUDA and HIP contract by default): a product whose rounding a sum must see, e.g.
// premul_sum's factor * x before the rank-order sum. CUDA: __fmul_rn (never contracted); clang (HIP,
// whose __fmul_rn is a plain product; its default -ffp-contract=fast-honor-pragmas honours the
// pragma): the product without the contract flag. Other host compilers: the plain product (host
// builds do not target FMA instructions unless asked to).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float mul_rn(float a, float b) {
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  return __fmul_rn(a, b);
#elif defined(__clang__)
#  pragma clang fp contract(off)
  return a * b;
#else
  return a * b;
#endif
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE double mul_rn(double a, double b) {
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  return __dmul_rn(a, b);
#elif defined(__clang__)
#  pragma clang fp contract(off)
  return a * b;
#else
  return a * b;
#endif
}

// ---- fp16 <-> fp32 ------------------------------------------------------------------------------
// IEEE round to nearest even, subnormals kept: v_cvt_f32_f16 / v_cvt_f16_f32 (through _Float16) on
// AMD, cvt.f32.f16 / cvt.rn.f16.f32 on NVIDIA, fp16::to_float / from_float on the host. A NaN stays a
// NaN (its payload may differ between them).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float half_bits_to_float(std::uint16_t h) {
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
#elif RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  _Float16 x;
  __builtin_memcpy(&x, &h, 2);
  return static_cast<float>(x);
#else
  return fp16::to_float(h);
#endif
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint16_t float_to_half_bits(float f) {
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  std::uint16_t h;
  asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
#elif RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  const _Float16 x = static_cast<_Float16>(f);
  std::uint16_t h;
  __builtin_memcpy(&h, &x, 2);
  return h;
#else
  return fp16::from_float(f);
#endif
}

// ---- two floats -> a bf16 pair ------------------------------------------------------------------
// Does this pass round a bf16 pair in one instruction (NVIDIA sm_80+)?
inline constexpr bool has_bf16x2_cvt = RCCLX_DETAIL_GPU_NV_BF16X2_CVT;

// lo in the low half, hi in the high half, each rounded to nearest even (overflow to Inf,
// subnormals kept). NaN: the instruction writes 0x7FFF, the software path (bf16::from_float,
// elsewhere) a quiet NaN with the input's sign; every other input gives the same bits on both.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t float2_to_bf16x2(float lo, float hi) {
#if RCCLX_DETAIL_GPU_NV_BF16X2_CVT
  std::uint32_t w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));  // the first source is the high half
  return w;
#else
  return static_cast<std::uint32_t>(bf16::from_float(lo)) | (static_cast<std::uint32_t>(bf16::from_float(hi)) << 16);
#endif
}

// ---- FP8 pairs ----------------------------------------------------------------------------------
// The two encodings the FP8 instructions take: 4 exponent and 3 mantissa bits, or 5 and 2. Which
// values a byte means is the instruction set's: OCP (E4M3FN / E5M2) on NVIDIA sm_89+ and AMD gfx950,
// FNUZ on AMD gfx94x. Byte 0 of a code pair (or word) is its first value.
enum class fp8_encoding { e4m3, e5m2 };

// Does this pass have NVIDIA's FP8 cvt (sm_89+) / AMD's v_cvt_pk FP8 conversions (gfx94x, gfx950)?
inline constexpr bool has_fp8_cvt_nv = RCCLX_DETAIL_GPU_NV_FP8_CVT;
inline constexpr bool has_fp8_cvt_amd = RCCLX_DETAIL_GPU_AMD_FP8_CVT != 0;

namespace detail {
template <fp8_encoding>
inline constexpr bool no_fp8_cvt = false;  // a static_assert that fires only where a call is made
}  // namespace detail

// NVIDIA sm_89+, cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32: two floats -> two OCP codes, round to
// nearest even, finite results only (overflow and +-Inf -> +-max; NaN -> 0x7F).
template <fp8_encoding E>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint16_t cvt_fp8x2_satfinite(float first, float second) {
#if RCCLX_DETAIL_GPU_NV_FP8_CVT
  std::uint16_t r;
  // cvt packs its first source into the upper byte.
  if constexpr (E == fp8_encoding::e4m3) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(second), "f"(first));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(second), "f"(first));
  }
  return r;
#else
  static_assert(detail::no_fp8_cvt<E>, "rcclx::gpu::cvt_fp8x2_satfinite: needs an sm_89+ device pass (has_fp8_cvt_nv)");
  return 0;
#endif
}

// NVIDIA sm_89+, cvt.rn.f16x2.{e4m3x2,e5m2x2}: two OCP codes -> two fp16 bit patterns (exact),
// code 0's in the low half.
template <fp8_encoding E>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t cvt_f16x2_from_fp8x2(std::uint16_t codes) {
#if RCCLX_DETAIL_GPU_NV_FP8_CVT
  std::uint32_t h;
  if constexpr (E == fp8_encoding::e4m3) {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h) : "h"(codes));
  } else {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h) : "h"(codes));
  }
  return h;
#else
  static_assert(detail::no_fp8_cvt<E>, "rcclx::gpu::cvt_f16x2_from_fp8x2: needs an sm_89+ device pass (has_fp8_cvt_nv)");
  return 0;
#endif
}

// AMD v_cvt_pk_{fp8,bf8}_f32: two floats -> two codes (round to nearest even) written into bytes
// 0-1 (HighHalf false) or 2-3 (true) of `old`, whose other half is kept. gfx94x writes FNUZ codes
// and turns an overflow into NaN (0x80); gfx950 writes OCP codes.
template <fp8_encoding E, bool HighHalf>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t cvt_pk_fp8_f32(float first, float second, std::uint32_t old) {
#if RCCLX_DETAIL_GPU_AMD_FP8_CVT
  if constexpr (E == fp8_encoding::e4m3) {
    return static_cast<std::uint32_t>(__builtin_amdgcn_cvt_pk_fp8_f32(first, second, static_cast<int>(old), HighHalf));
  } else {
    return static_cast<std::uint32_t>(__builtin_amdgcn_cvt_pk_bf8_f32(first, second, static_cast<int>(old), HighHalf));
  }
#else
  static_assert(detail::no_fp8_cvt<E>, "rcclx::gpu::cvt_pk_fp8_f32: needs a gfx94x or gfx950 device pass (has_fp8_cvt_amd)");
  return old;
#endif
}

// Two floats, the values of two FP8 codes.
struct float_pair {
  float first, second;
};

// AMD v_cvt_pk_f32_{fp8,bf8}: codes 0-1 (HighHalf false) or 2-3 (true) of the word -> two floats
// (exact; FNUZ codes on gfx94x, OCP on gfx950).
template <fp8_encoding E, bool HighHalf>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float_pair cvt_pk_f32_fp8(std::uint32_t codes) {
#if RCCLX_DETAIL_GPU_AMD_FP8_CVT
  const int v = static_cast<int>(codes);
  if constexpr (E == fp8_encoding::e4m3) {
    const auto f = __builtin_amdgcn_cvt_pk_f32_fp8(v, HighHalf);
    return {f[0], f[1]};
  } else {
    const auto f = __builtin_amdgcn_cvt_pk_f32_bf8(v, HighHalf);
    return {f[0], f[1]};
  }
#else
  static_assert(detail::no_fp8_cvt<E>, "rcclx::gpu::cvt_pk_f32_fp8: needs a gfx94x or gfx950 device pass (has_fp8_cvt_amd)");
  return {0.0f, 0.0f};
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
