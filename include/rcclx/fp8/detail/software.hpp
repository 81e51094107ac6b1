// rcclx/fp8/detail/software.hpp: the portable FP8 codecs: integer-only round-to-nearest-even (and
// stochastic rounding) on the float32 bit pattern. Identical bytes on every backend, compiler and
// floating-point environment (no FPU rounding mode, FTZ or fast-math dependence), so it is the
// reference the hardware paths are tested against.
#pragma once

#include <cstdint>

#include "../../core/types.hpp"
#include "../format.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {
namespace detail {

using rcclx::detail::bits_float;
using rcclx::detail::float_bits;

template <class Format>
struct sw_codec {
  using traits = format_traits<Format>;
  static constexpr int m = traits::mantissa_bits;
  static constexpr int b = traits::bias;
  // float32 bits of the smallest normal value of the format (2^(1-b)), and the exponent offset
  // that turns a float32 exponent field into the format's.
  static constexpr std::uint32_t min_normal_bits = static_cast<std::uint32_t>(128 - b) << 23;
  static constexpr std::uint32_t rebias = static_cast<std::uint32_t>(127 - b) << 23;
  static constexpr int dropped = 23 - m;  // float32 mantissa bits below the format's last bit

  // Magnitude code of |x| (a = its bits, finite or Inf, not NaN) rounded to nearest even as if
  // the exponent range had no top: a result above max_code means overflow (the IEEE definition).
  // Codes grow with the value, so a mantissa carry walks into the next binade by itself.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint32_t round_nearest_even(std::uint32_t a) {
    if (a >= min_normal_bits) {
      const std::uint32_t r = a - rebias;
      return (r + ((1u << (dropped - 1)) - 1u) + ((r >> dropped) & 1u)) >> dropped;
    }
    // Subnormal result: |x| / 2^(1-b-m) = significand >> sh, rounded.
    const int e = static_cast<int>(a >> 23);
    const int sh = 151 - b - m - e;  // >= 24 - m here
    if (e == 0 || sh >= 25) return 0;  // below half the smallest subnormal (a tie at sh = 24 -> even 0)
    const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
    const std::uint32_t q = sig >> sh;
    const std::uint32_t rem = sig & ((1u << sh) - 1u);
    const std::uint32_t half = 1u << (sh - 1);
    return q + ((rem > half || (rem == half && (q & 1u) != 0)) ? 1u : 0u);
  }

  // Stochastic rounding: the magnitude truncated, plus one when frac + random_bits carries out of
  // 32 bits, where frac is the dropped fraction of a code step as a 32-bit fixed-point number
  // (truncated). So P(round away from zero) = floor(frac * 2^32) / 2^32, and a value that is
  // exactly a code never moves. Top-of-range handling is the caller's (as for RNE).
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint32_t round_stochastic(std::uint32_t a,
                                                                            std::uint32_t random_bits) {
    std::uint32_t q, frac;
    if (a >= min_normal_bits) {
      const std::uint32_t r = a - rebias;
      q = r >> dropped;
      frac = r << (32 - dropped);
    } else {
      const int e = static_cast<int>(a >> 23);
      const int sh = 151 - b - m - e;
      if (e == 0 || sh >= 56) return 0;  // fraction below 2^-32 of a step
      const std::uint32_t sig = (a & 0x7FFFFFu) | 0x800000u;
      q = sh < 32 ? sig >> sh : 0u;
      frac = sh <= 32 ? sig << (32 - sh) : sig >> (sh - 32);
    }
    const std::uint32_t sum = frac + random_bits;
    return q + (sum < frac ? 1u : 0u);
  }

  template <overflow Mode>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint8_t nan_result(std::uint32_t sign) {
    if constexpr (traits::is_fnuz) {
      (void)sign;
      return 0x80;
    } else if constexpr (Mode == overflow::saturate) {
      // The NaN sm_89+ cvt.rn.satfinite writes for any NaN input (sign dropped): bit-exact with it.
      (void)sign;
      return traits::nan_code;
    } else {
      // PyTorch keeps the sign of a NaN (0x7F | sign for both OCP formats).
      return static_cast<std::uint8_t>(0x7Fu | sign);
    }
  }

  template <overflow Mode>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint8_t overflow_result(std::uint32_t sign) {
    if constexpr (Mode == overflow::saturate) {
      return static_cast<std::uint8_t>(traits::max_code | sign);
    } else if constexpr (traits::is_fnuz) {
      (void)sign;
      return 0x80;
    } else {
      return static_cast<std::uint8_t>(traits::inf_code | sign);  // e5m2: +-Inf; e4m3: +-NaN
    }
  }

  // q: magnitude code from a rounding function; sign: 0 or 0x80.
  template <overflow Mode>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint8_t finish(std::uint32_t q, std::uint32_t sign) {
    if (q > traits::max_code) return overflow_result<Mode>(sign);
    if constexpr (traits::is_fnuz) {
      if (q == 0) return 0;  // no negative zero: 0x80 would be NaN
    }
    return static_cast<std::uint8_t>(q | sign);
  }

  template <overflow Mode>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint8_t encode(float x) {
    const std::uint32_t u = float_bits(x);
    const std::uint32_t sign = (u >> 24) & 0x80u;
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return nan_result<Mode>(sign);
    return finish<Mode>(round_nearest_even(a), sign);  // Inf rounds far above max_code: overflow
  }

  template <overflow Mode>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint8_t encode_stochastic(float x, std::uint32_t random_bits) {
    const std::uint32_t u = float_bits(x);
    const std::uint32_t sign = (u >> 24) & 0x80u;
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return nan_result<Mode>(sign);
    return finish<Mode>(round_stochastic(a, random_bits), sign);
  }

  // Exact: normal codes by placing exponent and mantissa; subnormals as 2*v - min_normal, which
  // is exact (Sterbenz) and never touches a float32 denormal, so FTZ/DAZ cannot change it.
  // NaN codes give the quiet NaN 0x7FC00000.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float decode(std::uint8_t c) {
    const std::uint32_t mag = c & 0x7Fu;
    float v = bits_float((mag << dropped) + rebias);
    if (mag < (1u << m)) v = (v + v) - traits::min_normal;
    std::uint32_t bits = float_bits(v) | (static_cast<std::uint32_t>(c & 0x80u) << 24);
    if (is_inf_code<Format>(c)) bits = (c & 0x80u) ? 0xFF800000u : 0x7F800000u;
    if (is_nan_code<Format>(c)) bits = 0x7FC00000u;
    return bits_float(bits);
  }
};

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float bf16_to_float(bf16 h) {
  return bits_float(static_cast<std::uint32_t>(h.bits) << 16);
}

}  // namespace detail
}  // namespace fp8
RCCLX_NAMESPACE_END
