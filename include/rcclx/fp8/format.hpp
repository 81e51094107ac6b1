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
// Shared shape of a sign / exponent / mantissa byte. Codes 0x00..max_code are the non-negative
// finite values in increasing order; code | 0x80 is the negated value (except fnuz 0x80 = NaN).
template <int ExponentBits, int MantissaBits, int Bias, bool Fnuz, std::uint8_t MaxCode>
struct format_shape {
  static constexpr int exponent_bits = ExponentBits;
  static constexpr int mantissa_bits = MantissaBits;
  static constexpr int bias = Bias;
  static constexpr bool is_fnuz = Fnuz;                // finite, NaN = 0x80, unsigned zero
  static constexpr bool has_negative_zero = !Fnuz;     // 0x80 is -0 in OCP formats
  static constexpr std::uint8_t max_code = MaxCode;    // largest finite positive code
  // Exponents of the normal range: min_normal = 2^min_exponent, max_finite < 2^(max_exponent+1).
  static constexpr int min_exponent = 1 - Bias;
  static constexpr int max_exponent = (MaxCode >> MantissaBits) - Bias;
};
}  // namespace detail

template <>
struct format_traits<e4m3> : detail::format_shape<4, 3, 7, false, 0x7E> {
  static constexpr const char* name = "e4m3";
  static constexpr bool has_inf = false;
  static constexpr std::uint8_t nan_code = 0x7F;  // canonical (0xFF is NaN too)
  static constexpr std::uint8_t inf_code = 0x7F;  // no Inf: propagate mode writes NaN instead
  static constexpr float max_finite = 448.0f;
  static constexpr float min_normal = 0x1p-6f;
  static constexpr float min_subnormal = 0x1p-9f;
};

template <>
struct format_traits<e5m2> : detail::format_shape<5, 2, 15, false, 0x7B> {
  static constexpr const char* name = "e5m2";
  static constexpr bool has_inf = true;
  static constexpr std::uint8_t nan_code = 0x7F;  // canonical (0x7D..0x7F, 0xFD..0xFF are NaN)
  static constexpr std::uint8_t inf_code = 0x7C;  // +Inf; 0xFC is -Inf
  static constexpr float max_finite = 57344.0f;
  static constexpr float min_normal = 0x1p-14f;
  static constexpr float min_subnormal = 0x1p-16f;
};

template <>
struct format_traits<e4m3_fnuz> : detail::format_shape<4, 3, 8, true, 0x7F> {
  static constexpr const char* name = "e4m3_fnuz";
  static constexpr bool has_inf = false;
  static constexpr std::uint8_t nan_code = 0x80;  // the only NaN
  static constexpr std::uint8_t inf_code = 0x80;  // no Inf: propagate mode writes NaN instead
  static constexpr float max_finite = 240.0f;
  static constexpr float min_normal = 0x1p-7f;
  static constexpr float min_subnormal = 0x1p-10f;
};

template <>
struct format_traits<e5m2_fnuz> : detail::format_shape<5, 2, 16, true, 0x7F> {
  static constexpr const char* name = "e5m2_fnuz";
  static constexpr bool has_inf = false;
  static constexpr std::uint8_t nan_code = 0x80;
  static constexpr std::uint8_t inf_code = 0x80;
  static constexpr float max_finite = 57344.0f;
  static constexpr float min_normal = 0x1p-15f;
  static constexpr float min_subnormal = 0x1p-17f;
};

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

// Sanity of the tables above, derived from the shape (a typo in a constant fails here).
namespace detail {
template <class Format>
constexpr bool traits_consistent() {
  using T = format_traits<Format>;
  constexpr int m = T::mantissa_bits;
  constexpr int max_mant = T::max_code & ((1 << m) - 1);
  constexpr double max_value = double((1 << m) + max_mant) / double(1 << m) *
                               (T::max_exponent >= 0 ? double(1ull << T::max_exponent)
                                                     : 1.0 / double(1ull << -T::max_exponent));
  return max_value == double(T::max_finite) &&
         double(T::min_normal) * double(1ull << (T::max_exponent - T::min_exponent)) ==
             double(1ull << T::max_exponent) &&
         double(T::min_subnormal) * double(1 << m) == double(T::min_normal);
}
static_assert(traits_consistent<e4m3>() && traits_consistent<e5m2>() && traits_consistent<e4m3_fnuz>() &&
                  traits_consistent<e5m2_fnuz>(),
              "fp8 format traits inconsistent");
}  // namespace detail

}  // namespace fp8
RCCLX_NAMESPACE_END
