// rcclx/fp8/format.hpp: the four FP8 formats as empty tags, their traits, and the codec options
// (overflow mode, hardware-or-software path) shared by every FP8 header.
//
//   using F = rcclx::fp8::e4m3;                          // OCP E4M3FN: max 448, no Inf, -0 exists
//   static_assert(rcclx::fp8::format_traits<F>::max_code == 0x7E, "");
//   float m = rcclx::fp8::format_traits<rcclx::fp8::e4m3_fnuz>::max_finite;   // 240
//
// The same byte means different values in OCP and FNUZ formats (gfx942 converts only to FNUZ,
// gfx950 and sm_89+ only to OCP): the format is part of the type everywhere, and converting
// between formats is always an explicit decode + encode.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../config.hpp"

// Forces every FP8 codec onto the portable software path, even where `path::automatic` would use
// a hardware conversion. Exists so the gfx942 ISA check can prove that it detects the software
// path (tests/compile/isa/fp8.cmake), and to debug a suspected hardware difference.
#ifndef RCCLX_FP8_FORCE_SOFTWARE
#  define RCCLX_FP8_FORCE_SOFTWARE 0
#endif

// Unroll a short fixed loop. GCC spells it differently and warns on the CUDA spelling. Not on the
// host backend: it runs the algorithms for correctness, and unrolled peer batches multiply its
// compile time.
#if RCCLX_BACKEND_HOST
#  define RCCLX_DETAIL_FP8_UNROLL
#elif defined(__CUDA_ARCH__) || defined(__clang__)
#  define RCCLX_DETAIL_FP8_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#  define RCCLX_DETAIL_FP8_UNROLL  // nvcc's host pass rejects both spellings; -O2 unrolls anyway
#elif defined(__GNUC__)
#  define RCCLX_DETAIL_FP8_UNROLL _Pragma("GCC unroll 16")
#else
#  define RCCLX_DETAIL_FP8_UNROLL
#endif

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

// ---- format tags ------------------------------------------------------------------------------
struct e4m3 {};       // OCP E4M3FN (torch.float8_e4m3fn): bias 7, max 448, NaN S.1111.111, no Inf
struct e5m2 {};       // OCP E5M2 (torch.float8_e5m2): bias 15, max 57344, IEEE-like Inf and NaN
struct e4m3_fnuz {};  // E4M3FNUZ (torch.float8_e4m3fnuz, gfx942): bias 8, max 240, NaN = 0x80 only
struct e5m2_fnuz {};  // E5M2FNUZ (torch.float8_e5m2fnuz, gfx942): bias 16, max 57344, NaN = 0x80 only

// What encode does with a value too large for the format.
enum class overflow {
  saturate,   // finite overflow and +-Inf become +-max finite; NaN stays NaN. The communication mode.
  propagate,  // OCP non-saturating, as PyTorch's .to(float8): e4m3 -> NaN, e5m2 -> +-Inf, fnuz -> 0x80
  default_mode = saturate
};

// Which implementation a codec uses. Both give the same bytes (tests prove it over all 2^32
// float32 inputs on the GPU); `software` exists so tests and benchmarks can compare the two.
enum class path {
  automatic,  // a hardware conversion where this device pass has one, else software
  software,   // the portable integer implementation, on every backend and architecture
  default_path = automatic
};

// ---- traits -----------------------------------------------------------------------------------
// Fails with a readable message for anything that is not one of the four tags.
template <class Format>
struct format_traits {
  static_assert(sizeof(Format) == 0,
                "rcclx::fp8: Format must be one of rcclx::fp8::e4m3, e5m2, e4m3_fnuz, e5m2_fnuz");
};

namespace detail {
// What a format does with the codes past its largest finite one.
enum class specials {
  ieee,  // e5m2: +-Inf at max_code + 1, NaNs above it, -0 exists
  fn,    // e4m3 ("finite"): no Inf, S.1111.111 is NaN, -0 exists
  fnuz,  // finite, unsigned zero: 0x80 is the only NaN, no -0
};

// 2^e, exact (constexpr: C++17 has no constexpr ldexp).
constexpr float exp2i(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}

// A sign / exponent / mantissa byte, every trait derived from its shape. Codes 0x00..max_code are
// the non-negative finite values in increasing order; code | 0x80 is the negated value (except
// fnuz 0x80 = NaN).
template <int ExponentBits, int MantissaBits, int Bias, specials Specials, std::uint8_t MaxCode>
struct format_shape {
  static constexpr int exponent_bits = ExponentBits;
  static constexpr int mantissa_bits = MantissaBits;
  static constexpr int bias = Bias;
  static constexpr bool is_fnuz = Specials == specials::fnuz;  // finite, NaN = 0x80, unsigned zero
  static constexpr bool has_negative_zero = !is_fnuz;          // 0x80 is -0 in OCP formats
  static constexpr bool has_inf = Specials == specials::ieee;
  static constexpr std::uint8_t max_code = MaxCode;            // largest finite positive code
  // The canonical NaN (e4m3 0xFF, e5m2 0x7D..0x7F and 0xFD..0xFF are NaN too).
  static constexpr std::uint8_t nan_code = is_fnuz ? 0x80 : 0x7F;
  // +Inf (0x80 | inf_code is -Inf); without Inf, propagate mode writes this NaN instead.
  static constexpr std::uint8_t inf_code = has_inf ? MaxCode + 1 : nan_code;
  // Exponents of the normal range: min_normal = 2^min_exponent, max_finite < 2^(max_exponent+1).
  static constexpr int min_exponent = 1 - Bias;
  static constexpr int max_exponent = (MaxCode >> MantissaBits) - Bias;
  static constexpr float max_finite =
      exp2i(max_exponent) * (1.0f + float(MaxCode & ((1 << MantissaBits) - 1)) / float(1 << MantissaBits));
  static constexpr float min_normal = exp2i(min_exponent);
  static constexpr float min_subnormal = exp2i(min_exponent - MantissaBits);
  // PyTorch's spelling without "float8_" (FP8 has these two shapes only).
  static constexpr const char* name = ExponentBits == 4 ? (is_fnuz ? "e4m3_fnuz" : "e4m3") : (is_fnuz ? "e5m2_fnuz" : "e5m2");
};
}  // namespace detail

// The four formats: exponent bits, mantissa bits, bias, special codes, largest finite code.
template <> struct format_traits<e4m3> : detail::format_shape<4, 3, 7, detail::specials::fn, 0x7E> {};
template <> struct format_traits<e5m2> : detail::format_shape<5, 2, 15, detail::specials::ieee, 0x7B> {};
template <> struct format_traits<e4m3_fnuz> : detail::format_shape<4, 3, 8, detail::specials::fnuz, 0x7F> {};
template <> struct format_traits<e5m2_fnuz> : detail::format_shape<5, 2, 16, detail::specials::fnuz, 0x7F> {};

// The shapes above against the formats' published values (a typo in a shape fails here).
namespace detail {
template <class Format>
constexpr bool traits_are(float max_finite, float min_normal, float min_subnormal, int nan_code, int inf_code) {
  using T = format_traits<Format>;
  return T::max_finite == max_finite && T::min_normal == min_normal && T::min_subnormal == min_subnormal &&
         T::nan_code == nan_code && T::inf_code == inf_code;
}
static_assert(traits_are<e4m3>(448.0f, 0x1p-6f, 0x1p-9f, 0x7F, 0x7F) &&
                  traits_are<e5m2>(57344.0f, 0x1p-14f, 0x1p-16f, 0x7F, 0x7C) &&
                  traits_are<e4m3_fnuz>(240.0f, 0x1p-7f, 0x1p-10f, 0x80, 0x80) &&
                  traits_are<e5m2_fnuz>(57344.0f, 0x1p-15f, 0x1p-17f, 0x80, 0x80),
              "fp8 format traits inconsistent");
}  // namespace detail

template <class Format>
inline constexpr bool is_format_v = std::is_same<Format, e4m3>::value || std::is_same<Format, e5m2>::value ||
                                    std::is_same<Format, e4m3_fnuz>::value ||
                                    std::is_same<Format, e5m2_fnuz>::value;

// Code classification (any code, either sign).
template <class Format>
RCCLX_HOST_DEVICE constexpr bool is_nan_code(std::uint8_t c) {
  using T = format_traits<Format>;
  if constexpr (T::is_fnuz) {
    return c == 0x80;
  } else if constexpr (T::has_inf) {
    return (c & 0x7F) > T::inf_code;
  } else {
    return (c & 0x7F) == 0x7F;
  }
}

template <class Format>
RCCLX_HOST_DEVICE constexpr bool is_inf_code(std::uint8_t c) {
  using T = format_traits<Format>;
  if constexpr (T::has_inf) {
    return (c & 0x7F) == T::inf_code;
  } else {
    (void)c;
    return false;
  }
}

}  // namespace fp8
RCCLX_NAMESPACE_END
