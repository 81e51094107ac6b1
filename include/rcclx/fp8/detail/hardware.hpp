// rcclx/fp8/detail/hardware.hpp: FP8 conversion instructions of the current device pass, wrapped
// so that their results are bit-identical to detail::sw_codec (the inputs are conditioned first
// where the instruction's own rules differ).
//
//   NVIDIA sm_89+  cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32   OCP encode, saturating (NaN -> 0x7F)
//                  cvt.rn.f16x2.{e4m3x2,e5m2x2}           OCP decode (exact), then f16 -> f32
//   AMD gfx94x     v_cvt_pk_{fp8,bf8}_f32                 FNUZ encode; overflow becomes NaN in
//                                                         hardware, so inputs are clamped first
//                  v_cvt_pk_f32_{fp8,bf8}                 FNUZ decode
//   AMD gfx950     the same builtins produce OCP formats there; used for saturating OCP encode
//                  and decode when the compiler knows gfx950 (clang-19 does not). Unverified on
//                  hardware: no MI350 was available (docs/numerics.md).
//
// has_encode / has_decode are constexpr per pass: false on every host pass, so host code always
// takes the software path.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../gpu/vendor.hpp"
#include "../format.hpp"
#include "software.hpp"

#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE && defined(__has_builtin)
#  if __has_builtin(__builtin_amdgcn_cvt_pk_fp8_f32) && __has_builtin(__builtin_amdgcn_cvt_pk_f32_fp8)
#    define RCCLX_DETAIL_FP8_AMD_BUILTINS 1
#  endif
#endif
#ifndef RCCLX_DETAIL_FP8_AMD_BUILTINS
#  define RCCLX_DETAIL_FP8_AMD_BUILTINS 0
#endif

#if !RCCLX_FP8_FORCE_SOFTWARE && RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE && RCCLX_CUDA_ARCH >= 890
#  define RCCLX_DETAIL_FP8_HW_NV 1
#else
#  define RCCLX_DETAIL_FP8_HW_NV 0
#endif
#if !RCCLX_FP8_FORCE_SOFTWARE && RCCLX_ARCH_GFX94X && RCCLX_DETAIL_FP8_AMD_BUILTINS
#  define RCCLX_DETAIL_FP8_HW_GFX94X 1
#else
#  define RCCLX_DETAIL_FP8_HW_GFX94X 0
#endif
#if !RCCLX_FP8_FORCE_SOFTWARE && RCCLX_ARCH_GFX950 && RCCLX_DETAIL_FP8_AMD_BUILTINS
#  define RCCLX_DETAIL_FP8_HW_GFX950 1
#else
#  define RCCLX_DETAIL_FP8_HW_GFX950 0
#endif

RCCLX_NAMESPACE_BEGIN
namespace fp8 {
namespace detail {

template <class Format>
inline constexpr bool is_ocp_v = std::is_same<Format, e4m3>::value || std::is_same<Format, e5m2>::value;

// Does this device pass convert `Format` in hardware (for the given overflow mode)?
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE constexpr bool has_hw_encode() {
#if RCCLX_DETAIL_FP8_HW_NV
  return is_ocp_v<Format> && Mode == overflow::saturate;  // satfinite only
#elif RCCLX_DETAIL_FP8_HW_GFX94X
  return !is_ocp_v<Format>;  // both modes: propagate is expressed by conditioning the input
#elif RCCLX_DETAIL_FP8_HW_GFX950
  return is_ocp_v<Format> && Mode == overflow::saturate;
#else
  return false;
#endif
}

template <class Format>
RCCLX_HOST_DEVICE constexpr bool has_hw_decode() {
#if RCCLX_DETAIL_FP8_HW_NV || RCCLX_DETAIL_FP8_HW_GFX950
  return is_ocp_v<Format>;
#elif RCCLX_DETAIL_FP8_HW_GFX94X
  return !is_ocp_v<Format>;
#else
  return false;
#endif
}

// A short name for what the pass uses, for test and benchmark reports.
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE constexpr int hw_encode_kind() {  // 0 software, 1 NVIDIA cvt, 2 gfx94x, 3 gfx950
#if RCCLX_DETAIL_FP8_HW_NV
  return has_hw_encode<Format, Mode>() ? 1 : 0;
#elif RCCLX_DETAIL_FP8_HW_GFX94X
  return has_hw_encode<Format, Mode>() ? 2 : 0;
#elif RCCLX_DETAIL_FP8_HW_GFX950
  return has_hw_encode<Format, Mode>() ? 3 : 0;
#else
  return 0;
#endif
}

#if RCCLX_DETAIL_FP8_HW_GFX94X || RCCLX_DETAIL_FP8_HW_GFX950
// Makes the AMD instruction's answer equal to the software one: values that must overflow are
// turned into NaN (propagate: fnuz overflow is 0x80 = NaN) or clamped to +-max (saturate, and the
// band between max and the overflow threshold, which rounds to max); values that round to zero
// become +0 so an FNUZ result can never be 0x80 (FNUZ has no -0; this also holds if the hardware
// kept the sign of a rounded-away negative). NaN compares false everywhere and passes through.
template <class Format, overflow Mode>
RCCLX_DEVICE RCCLX_FORCEINLINE float amd_condition(float x) {
  using T = format_traits<Format>;
  constexpr float max = T::max_finite;
  // max + half a step of the top binade; a tie there overflows when max's mantissa is odd.
  constexpr float threshold = T::max_finite + float(1ull << (T::max_exponent - T::mantissa_bits)) * 0.5f;
  constexpr bool tie_overflows = (T::max_code & 1) != 0;
  const float ax = __builtin_fabsf(x);
  float y = ax > max ? __builtin_copysignf(max, x) : x;  // a NaN compares false and stays
  if constexpr (T::is_fnuz) {
    y = ax <= T::min_subnormal * 0.5f ? 0.0f : y;
  }
  if constexpr (Mode == overflow::propagate) {
    const bool over = tie_overflows ? ax >= threshold : ax > threshold;
    y = over ? __builtin_nanf("") : y;
  }
  return y;
}
#endif

// Two floats -> two codes (byte 0 = a). Only called when has_hw_encode is true.
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint16_t hw_encode2(float a, float b) {
#if RCCLX_DETAIL_FP8_HW_NV
  std::uint16_t r;
  // cvt packs its first source into the upper byte.
  if constexpr (std::is_same<Format, e4m3>::value) {
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  } else {
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(b), "f"(a));
  }
  return r;
#elif RCCLX_DETAIL_FP8_HW_GFX94X || RCCLX_DETAIL_FP8_HW_GFX950
  a = amd_condition<Format, Mode>(a);
  b = amd_condition<Format, Mode>(b);
  int w;
  if constexpr (std::is_same<Format, e4m3>::value || std::is_same<Format, e4m3_fnuz>::value) {
    w = __builtin_amdgcn_cvt_pk_fp8_f32(a, b, 0, false);
  } else {
    w = __builtin_amdgcn_cvt_pk_bf8_f32(a, b, 0, false);
  }
#  if RCCLX_DETAIL_FP8_HW_GFX950
  // The OCP NaN code the software path writes, whatever the instruction chose.
  if (a != a) w = (w & ~0xFF) | sw_codec<Format>::template nan_result<Mode>(0);
  if (b != b) w = (w & ~0xFF00) | (sw_codec<Format>::template nan_result<Mode>(0) << 8);
#  endif
  return static_cast<std::uint16_t>(w);
#else
  return static_cast<std::uint16_t>(sw_codec<Format>::template encode<Mode>(a) |
                                    (sw_codec<Format>::template encode<Mode>(b) << 8));
#endif
}

// Four floats -> one word (byte i = x_i).
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t hw_encode4(float x0, float x1, float x2, float x3) {
#if RCCLX_DETAIL_FP8_HW_GFX94X
  // gfx94x writes the second pair straight into the upper half of the same register.
  x0 = amd_condition<Format, Mode>(x0);
  x1 = amd_condition<Format, Mode>(x1);
  x2 = amd_condition<Format, Mode>(x2);
  x3 = amd_condition<Format, Mode>(x3);
  int w;
  if constexpr (std::is_same<Format, e4m3_fnuz>::value) {
    w = __builtin_amdgcn_cvt_pk_fp8_f32(x0, x1, 0, false);
    w = __builtin_amdgcn_cvt_pk_fp8_f32(x2, x3, w, true);
  } else {
    w = __builtin_amdgcn_cvt_pk_bf8_f32(x0, x1, 0, false);
    w = __builtin_amdgcn_cvt_pk_bf8_f32(x2, x3, w, true);
  }
  return static_cast<std::uint32_t>(w);
#else
  return static_cast<std::uint32_t>(hw_encode2<Format, Mode>(x0, x1)) |
         (static_cast<std::uint32_t>(hw_encode2<Format, Mode>(x2, x3)) << 16);
#endif
}

// One word of four codes -> four floats. Only called when has_hw_decode is true. NaN codes give
// some NaN (the payload may differ from the software path's 0x7FC00000).
template <class Format>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void hw_decode4(std::uint32_t w, float* out) {
#if RCCLX_DETAIL_FP8_HW_NV
  std::uint32_t h01, h23;
  const std::uint16_t lo = static_cast<std::uint16_t>(w), hi = static_cast<std::uint16_t>(w >> 16);
  if constexpr (std::is_same<Format, e4m3>::value) {
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h01) : "h"(lo));
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h23) : "h"(hi));
  } else {
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h01) : "h"(lo));
    asm("cvt.rn.f16x2.e5m2x2 %0, %1;" : "=r"(h23) : "h"(hi));
  }
  const std::uint16_t h[4] = {static_cast<std::uint16_t>(h01), static_cast<std::uint16_t>(h01 >> 16),
                              static_cast<std::uint16_t>(h23), static_cast<std::uint16_t>(h23 >> 16)};
  RCCLX_DETAIL_FP8_UNROLL
  for (int i = 0; i < 4; ++i) asm("cvt.f32.f16 %0, %1;" : "=f"(out[i]) : "h"(h[i]));
#elif RCCLX_DETAIL_FP8_HW_GFX94X || RCCLX_DETAIL_FP8_HW_GFX950
  const int v = static_cast<int>(w);
  if constexpr (std::is_same<Format, e4m3>::value || std::is_same<Format, e4m3_fnuz>::value) {
    const auto lo = __builtin_amdgcn_cvt_pk_f32_fp8(v, false);
    const auto hi = __builtin_amdgcn_cvt_pk_f32_fp8(v, true);
    out[0] = lo[0], out[1] = lo[1], out[2] = hi[0], out[3] = hi[1];
  } else {
    const auto lo = __builtin_amdgcn_cvt_pk_f32_bf8(v, false);
    const auto hi = __builtin_amdgcn_cvt_pk_f32_bf8(v, true);
    out[0] = lo[0], out[1] = lo[1], out[2] = hi[0], out[3] = hi[1];
  }
#else
  for (int i = 0; i < 4; ++i) out[i] = sw_codec<Format>::decode(static_cast<std::uint8_t>(w >> (8 * i)));
#endif
}

}  // namespace detail
}  // namespace fp8
RCCLX_NAMESPACE_END
