// rcclx/fp8/fp8.hpp: scalar FP8 codecs for the four formats, host and device, round to nearest even.
// Bit-exact on every backend; the hardware conversion is used where the device pass has one.
//
//   #include <rcclx/fp8/fp8.hpp>
//   namespace f8 = rcclx::fp8;
//   std::uint8_t q = f8::encode<f8::e4m3>(500.0f);                          // 0x7E (448): saturate
//   std::uint8_t p = f8::encode<f8::e4m3, f8::overflow::propagate>(500.0f); // 0x7F (NaN), as PyTorch
//   float x = f8::decode<f8::e4m3_fnuz>(0x80);                              // NaN (FNUZ's only NaN)
//   std::uint8_t s = f8::encode_sr<f8::e5m2>(0.3f, random_bits);            // stochastic rounding
//
// Packed codecs (2..16 values per call) are in <rcclx/fp8/packed.hpp>, block scaling in
// <rcclx/fp8/block_scale.hpp>, whole-buffer kernels in <rcclx/fp8/quantize_blocks.hpp>.
// docs/numerics.md lists the formats, the modes and the error bounds.
//
// Rules (both modes): round to nearest, ties to even; subnormals exact; overflow as in IEEE 754:
// the value rounded with an unbounded exponent exceeds max finite (e4m3: |x| > 464, since a tie at
// 464 goes to the even 448; e5m2 and e5m2_fnuz: |x| >= 61440; e4m3_fnuz: |x| >= 248).
//   saturate:  overflow and +-Inf -> +-max; NaN -> 0x7F (OCP, sign dropped, as NVIDIA's
//              cvt.rn.satfinite) or 0x80 (fnuz).
//   propagate: e4m3 -> 0x7F|sign (NaN), e5m2 -> 0x7C|sign (Inf), fnuz -> 0x80; NaN -> 0x7F|sign
//              (OCP, sign kept, as PyTorch) or 0x80 (fnuz).
//   FNUZ formats have no -0: -0.0 and negatives that round to zero encode 0x00, never 0x80.
#pragma once

#include <cstdint>

#include "../core/types.hpp"
#include "detail/hardware.hpp"
#include "detail/software.hpp"
#include "format.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

template <class Format, overflow Mode = overflow::saturate, path Path = path::automatic>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint8_t encode(float x) {
  if constexpr (Path == path::automatic && detail::has_hw_encode<Format, Mode>()) {
    return static_cast<std::uint8_t>(detail::hw_encode2<Format, Mode>(x, 0.0f));
  } else {
    return detail::sw_codec<Format>::template encode<Mode>(x);
  }
}

// bf16 input: exact widening to float first, so the result equals encode(float(x)).
template <class Format, overflow Mode = overflow::saturate, path Path = path::automatic>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint8_t encode(bf16 x) {
  return encode<Format, Mode, Path>(detail::bf16_to_float(x));
}

// Exact for every finite code (every FP8 value is exactly a float, and exactly a bf16, so
// rcclx::bf16(decode(c)) is exact too). NaN codes give a quiet NaN, Inf codes +-Inf.
template <class Format, path Path = path::automatic>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float decode(std::uint8_t code) {
  if constexpr (Path == path::automatic && detail::has_hw_decode<Format>()) {
    float out[4];
    detail::hw_decode4<Format>(code, out);
    return out[0];
  } else {
    return detail::sw_codec<Format>::decode(code);
  }
}

// Stochastic rounding with caller-supplied random bits (one uniformly random 32-bit word per
// value): rounds |x| away from zero with probability floor(f * 2^32) / 2^32, f being the distance
// from the truncated code in code steps; values that are codes are exact. Overflow and NaN follow
// `Mode` exactly as encode does. Software on every backend (see docs/numerics.md on gfx942's
// v_cvt_sr_fp8_f32, which is not used because its use of the random word is not specified).
template <class Format, overflow Mode = overflow::saturate>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint8_t encode_sr(float x, std::uint32_t random_bits) {
  return detail::sw_codec<Format>::template encode_stochastic<Mode>(x, random_bits);
}

template <class Format, overflow Mode = overflow::saturate>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint8_t encode_sr(bf16 x, std::uint32_t random_bits) {
  return encode_sr<Format, Mode>(detail::bf16_to_float(x), random_bits);
}

// Whether `encode<Format, Mode>` / `decode<Format>` use a hardware instruction in the current
// compilation pass (always false in host code). For reports; results are identical either way.
template <class Format, overflow Mode = overflow::saturate>
RCCLX_HOST_DEVICE constexpr bool hardware_encode() {
  return detail::has_hw_encode<Format, Mode>();
}
template <class Format>
RCCLX_HOST_DEVICE constexpr bool hardware_decode() {
  return detail::has_hw_decode<Format>();
}

}  // namespace fp8
RCCLX_NAMESPACE_END
