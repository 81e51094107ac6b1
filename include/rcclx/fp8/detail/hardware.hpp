// rcclx/fp8/detail/hardware.hpp: FP8 conversion instructions of the current device pass (their
// wrappers are in gpu/convert.hpp), used so that their results are bit-identical to detail::sw_codec
// (the inputs are conditioned first where the instruction's own rules differ).
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
// has_hw_encode / has_hw_decode are constexpr per pass: false on every host pass, so host code
// always takes the software path.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../../gpu/convert.hpp"
#include "../format.hpp"
#include "software.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {
namespace detail {

template <class Format>
inline constexpr bool is_ocp_v = std::is_same<Format, e4m3>::value || std::is_same<Format, e5m2>::value;

// The encoding a gpu/ conversion instruction takes for Format (OCP or FNUZ is the architecture's).
template <class Format>
inline constexpr gpu::fp8_encoding encoding_v =
    std::is_same<Format, e4m3>::value || std::is_same<Format, e4m3_fnuz>::value ? gpu::fp8_encoding::e4m3
                                                                               : gpu::fp8_encoding::e5m2;

// The conversion instructions of this pass: none on every host pass and under RCCLX_FP8_FORCE_SOFTWARE.
enum class hw_isa { none, nv, gfx94x, gfx950 };  // the numbers of hw_encode_kind
inline constexpr hw_isa pass_isa = RCCLX_FP8_FORCE_SOFTWARE                       ? hw_isa::none
                                   : gpu::has_fp8_cvt_nv                          ? hw_isa::nv
                                   : gpu::has_fp8_cvt_amd && RCCLX_ARCH_GFX94X    ? hw_isa::gfx94x
                                   : gpu::has_fp8_cvt_amd && RCCLX_ARCH_GFX950    ? hw_isa::gfx950
                                                                                  : hw_isa::none;
inline constexpr bool pass_is_amd = pass_isa == hw_isa::gfx94x || pass_isa == hw_isa::gfx950;

// Does this device pass convert `Format` in hardware (for the given overflow mode)?
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE constexpr bool has_hw_encode() {
  if constexpr (pass_isa == hw_isa::nv || pass_isa == hw_isa::gfx950) {
    return is_ocp_v<Format> && Mode == overflow::saturate;  // satfinite only
  } else if constexpr (pass_isa == hw_isa::gfx94x) {
    return !is_ocp_v<Format>;  // both modes: propagate is expressed by conditioning the input
  } else {
    return false;
  }
}

template <class Format>
RCCLX_HOST_DEVICE constexpr bool has_hw_decode() {
  if constexpr (pass_isa == hw_isa::nv || pass_isa == hw_isa::gfx950) {
    return is_ocp_v<Format>;
  } else if constexpr (pass_isa == hw_isa::gfx94x) {
    return !is_ocp_v<Format>;
  } else {
    return false;
  }
}

// A short name for what the pass uses, for test and benchmark reports.
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE constexpr int hw_encode_kind() {  // 0 software, 1 NVIDIA cvt, 2 gfx94x, 3 gfx950
  return has_hw_encode<Format, Mode>() ? static_cast<int>(pass_isa) : 0;
}

// Makes the AMD instruction's answer equal to the software one: values that must overflow are
// turned into NaN (propagate: fnuz overflow is 0x80 = NaN) or clamped to +-max (saturate, and the
// band between max and the overflow threshold, which rounds to max); values that round to zero
// become +0 so an FNUZ result can never be 0x80 (FNUZ has no -0; this also holds if the hardware
// kept the sign of a rounded-away negative). NaN compares false everywhere and passes through.
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float amd_condition(float x) {
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

// Two floats -> two codes (byte 0 = a). Only called when has_hw_encode is true.
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint16_t hw_encode2(float a, float b) {
  if constexpr (pass_isa == hw_isa::nv) {
    return gpu::cvt_fp8x2_satfinite<encoding_v<Format>>(a, b);
  } else if constexpr (pass_is_amd) {
    a = amd_condition<Format, Mode>(a);
    b = amd_condition<Format, Mode>(b);
    std::uint32_t w = gpu::cvt_pk_fp8_f32<encoding_v<Format>, false>(a, b, 0);
    if constexpr (pass_isa == hw_isa::gfx950) {
      // The OCP NaN code the software path writes, whatever the instruction chose.
      if (a != a) w = (w & ~0xFFu) | sw_codec<Format>::template nan_result<Mode>(0);
      if (b != b) w = (w & ~0xFF00u) | (sw_codec<Format>::template nan_result<Mode>(0) << 8);
    }
    return static_cast<std::uint16_t>(w);
  } else {
    return static_cast<std::uint16_t>(sw_codec<Format>::template encode<Mode>(a) |
                                      (sw_codec<Format>::template encode<Mode>(b) << 8));
  }
}

// Four floats -> one word (byte i = x_i).
template <class Format, overflow Mode>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t hw_encode4(float x0, float x1, float x2, float x3) {
  if constexpr (pass_isa == hw_isa::gfx94x) {
    // gfx94x writes the second pair straight into the upper half of the same register.
    x0 = amd_condition<Format, Mode>(x0);
    x1 = amd_condition<Format, Mode>(x1);
    x2 = amd_condition<Format, Mode>(x2);
    x3 = amd_condition<Format, Mode>(x3);
    const std::uint32_t w = gpu::cvt_pk_fp8_f32<encoding_v<Format>, false>(x0, x1, 0);
    return gpu::cvt_pk_fp8_f32<encoding_v<Format>, true>(x2, x3, w);
  } else {
    return static_cast<std::uint32_t>(hw_encode2<Format, Mode>(x0, x1)) |
           (static_cast<std::uint32_t>(hw_encode2<Format, Mode>(x2, x3)) << 16);
  }
}

// One word of four codes -> four floats. Only called when has_hw_decode is true. NaN codes give
// some NaN (the payload may differ from the software path's 0x7FC00000).
template <class Format>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void hw_decode4(std::uint32_t w, float* out) {
  if constexpr (pass_isa == hw_isa::nv) {
    // OCP codes to fp16 (exact), then fp16 to float.
    const std::uint16_t lo = static_cast<std::uint16_t>(w), hi = static_cast<std::uint16_t>(w >> 16);
    const std::uint32_t h01 = gpu::cvt_f16x2_from_fp8x2<encoding_v<Format>>(lo);
    const std::uint32_t h23 = gpu::cvt_f16x2_from_fp8x2<encoding_v<Format>>(hi);
    const std::uint16_t h[4] = {static_cast<std::uint16_t>(h01), static_cast<std::uint16_t>(h01 >> 16),
                                static_cast<std::uint16_t>(h23), static_cast<std::uint16_t>(h23 >> 16)};
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < 4; ++i) out[i] = gpu::half_bits_to_float(h[i]);
  } else if constexpr (pass_is_amd) {
    const gpu::float_pair lo = gpu::cvt_pk_f32_fp8<encoding_v<Format>, false>(w);
    const gpu::float_pair hi = gpu::cvt_pk_f32_fp8<encoding_v<Format>, true>(w);
    out[0] = lo.first, out[1] = lo.second, out[2] = hi.first, out[3] = hi.second;
  } else {
    for (int i = 0; i < 4; ++i) out[i] = sw_codec<Format>::decode(static_cast<std::uint8_t>(w >> (8 * i)));
  }
}

}  // namespace detail
}  // namespace fp8
RCCLX_NAMESPACE_END
