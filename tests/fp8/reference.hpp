// tests/fp8/reference.hpp: an independent, obviously-correct FP8 reference for the tests.
// It shares nothing with include/rcclx/fp8 but the tag types: its own table of format parameters,
// decode by the textbook formula in double, and encode by enumerating the codes: the nearest
// value wins, a tie goes to the even code, and overflow is decided against the "next code" the
// format would have if its exponent range had no top (IEEE 754's definition).
#pragma once

#include <rcclx/fp8/format.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace fp8_ref {

enum class mode { saturate, propagate };

struct params {
  const char* name;
  int exponent_bits, mantissa_bits, bias;
  bool fnuz;      // NaN = 0x80 only, no -0, no Inf
  bool ieee_top;  // top exponent is Inf/NaN (e5m2); otherwise only S.1111.111 is NaN (e4m3)
};

template <class F> params params_of();
template <> inline params params_of<rcclx::fp8::e4m3>() { return {"e4m3", 4, 3, 7, false, false}; }
template <> inline params params_of<rcclx::fp8::e5m2>() { return {"e5m2", 5, 2, 15, false, true}; }
template <> inline params params_of<rcclx::fp8::e4m3_fnuz>() { return {"e4m3_fnuz", 4, 3, 8, true, false}; }
template <> inline params params_of<rcclx::fp8::e5m2_fnuz>() { return {"e5m2_fnuz", 5, 2, 16, true, false}; }

inline std::uint32_t bits(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float from_bits(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// (-1)^s * 2^(e - bias) * (1 + m / 2^M), or 2^(1 - bias) * m / 2^M for e == 0; specials by the
// format's rules. Returns NaN for NaN codes.
inline double decode(const params& p, std::uint8_t c) {
  const int s = c >> 7;
  const int e = (c >> p.mantissa_bits) & ((1 << p.exponent_bits) - 1);
  const int m = c & ((1 << p.mantissa_bits) - 1);
  const int emax_field = (1 << p.exponent_bits) - 1;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (p.fnuz) {
    if (c == 0x80) return nan;
  } else if (p.ieee_top) {
    if (e == emax_field) return m == 0 ? (s ? -HUGE_VAL : HUGE_VAL) : nan;
  } else if (e == emax_field && m == (1 << p.mantissa_bits) - 1) {
    return nan;
  }
  const double mag = e == 0 ? std::ldexp(double(m), 1 - p.bias - p.mantissa_bits)
                            : std::ldexp(1.0 + std::ldexp(double(m), -p.mantissa_bits), e - p.bias);
  return s ? -mag : mag;
}

// The ordered non-negative finite values (index = code), the largest finite code, and the value
// of the code after it were the exponent unbounded.
struct table {
  params p;
  std::vector<double> values;
  int max_code;
  double next_after_max;
  explicit table(const params& q) : p(q) {
    for (int c = 0; c < 0x80; ++c) {
      const double v = decode(p, static_cast<std::uint8_t>(c));
      if (!std::isfinite(v)) break;
      values.push_back(v);
    }
    max_code = static_cast<int>(values.size()) - 1;
    next_after_max = values[max_code] + (values[max_code] - values[max_code - 1]);
  }
  std::uint8_t nan_code(bool negative, mode md) const {
    if (p.fnuz) return 0x80;
    return static_cast<std::uint8_t>(md == mode::saturate ? 0x7F : (negative ? 0xFF : 0x7F));
  }
  std::uint8_t overflow_code(bool negative, mode md) const {
    const std::uint8_t s = negative ? 0x80 : 0;
    if (md == mode::saturate) return static_cast<std::uint8_t>(max_code | s);
    if (p.fnuz) return 0x80;
    return static_cast<std::uint8_t>((p.ieee_top ? 0x7C : 0x7F) | s);
  }
  std::uint8_t with_sign(int code, bool negative) const {
    if (code == 0 && p.fnuz) return 0;
    return static_cast<std::uint8_t>(code | (negative ? 0x80 : 0));
  }
  // Largest code whose value is <= a (a finite, >= 0, < next_after_max).
  int floor_code(double a) const {
    int lo = 0, hi = max_code;
    if (a >= values[max_code]) return max_code;
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      (values[mid] <= a ? lo : hi) = mid;
    }
    return lo;
  }
  double value_of(int code) const { return code > max_code ? next_after_max : values[code]; }

  std::uint8_t encode(float xf, mode md) const {
    const double x = xf;
    const bool neg = std::signbit(x);
    if (std::isnan(x)) return nan_code(neg, md);
    const double a = std::fabs(x);
    if (a >= next_after_max) return overflow_code(neg, md);
    const int lo = floor_code(a), hi = lo + 1;
    const double dlo = a - value_of(lo), dhi = value_of(hi) - a;
    const int q = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
    if (q > max_code) return overflow_code(neg, md);
    return with_sign(q, neg);
  }

  // Stochastic: up with probability floor(frac * 2^32) / 2^32 via the caller's random word.
  std::uint8_t encode_sr(float xf, std::uint32_t random_bits, mode md) const {
    const double x = xf;
    const bool neg = std::signbit(x);
    if (std::isnan(x)) return nan_code(neg, md);
    const double a = std::fabs(x);
    if (a >= next_after_max) return overflow_code(neg, md);
    const int lo = floor_code(a);
    const double frac = (a - value_of(lo)) / (value_of(lo + 1) - value_of(lo));
    const std::uint64_t f32 = static_cast<std::uint64_t>(std::floor(std::ldexp(frac, 32)));
    const int q = (f32 + random_bits >= (std::uint64_t(1) << 32)) ? lo + 1 : lo;
    if (q > max_code) return overflow_code(neg, md);
    return with_sign(q, neg);
  }
};

template <class F>
inline const table& table_of() {
  static const table t(params_of<F>());
  return t;
}

// Interesting float32 inputs for a format: every code value and every midpoint between adjacent
// codes (including the one above max), each with its neighbours 1 and 2 float ulps away, both
// signs; plus zeros, float denormals, FLT_MIN/MAX, infinities and NaNs of several payloads.
inline std::vector<float> boundary_inputs(const table& t) {
  std::vector<float> out;
  auto around = [&](double v) {
    const float f = static_cast<float>(v);
    if (static_cast<double>(f) != v) return;  // all code values and midpoints are floats
    float lo = f, hi = f;
    out.push_back(f);
    for (int k = 0; k < 2; ++k) {
      lo = std::nextafter(lo, -HUGE_VALF);
      hi = std::nextafter(hi, HUGE_VALF);
      out.push_back(lo);
      out.push_back(hi);
    }
  };
  for (int c = 0; c <= t.max_code; ++c) {
    around(t.value_of(c));
    around(0.5 * (t.value_of(c) + t.value_of(c + 1)));
  }
  around(t.next_after_max);
  around(2 * t.next_after_max);
  const std::uint32_t specials[] = {0x00000000u, 0x00000001u, 0x00000002u, 0x007FFFFFu, 0x00800000u, 0x00800001u,
                                    0x7F7FFFFFu, 0x7F7FFFFEu, 0x7F800000u, 0x7F800001u, 0x7FC00000u, 0x7FFFFFFFu,
                                    0x7FBFFFFFu, 0x3F800000u, 0x33800000u, 0x2F800000u, 0x4F800000u};
  for (std::uint32_t s : specials) out.push_back(from_bits(s));
  const std::size_t n = out.size();
  for (std::size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  return out;
}

}  // namespace fp8_ref
