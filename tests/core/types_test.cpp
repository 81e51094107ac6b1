// bf16 / fp16 conversions against an independent reference: the IEEE rounding done in double
// with std::nextafter-free arithmetic on the exact values (every 16-bit pattern decoded by a
// formula, and the nearest-even choice recomputed from the two neighbours).
#include <rcclx/core/types.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "../support/catch.hpp"

namespace {

double decode_fp16(std::uint16_t h) {  // reference decode by formula
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

double decode_bf16(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 7) & 255, m = h & 127;
  double v;
  if (e == 255) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -133);
  else v = std::ldexp(128 + m, e - 134);
  return s ? -v : v;
}

// Reference RNE: among all finite codes of the format, the nearest (ties: even mantissa); beyond
// the largest finite value by half an ulp or more: infinity. Found by bisection on the ordered codes.
template <class Decode>
std::uint16_t reference_encode(double x, Decode decode, std::uint16_t max_finite_code, std::uint16_t inf_code) {
  const bool neg = std::signbit(x);
  const double a = std::fabs(x);
  std::uint16_t lo = 0, hi = max_finite_code;
  if (a >= decode(max_finite_code)) {
    const double ulp = decode(max_finite_code) - decode(static_cast<std::uint16_t>(max_finite_code - 1));
    const std::uint16_t c = a >= decode(max_finite_code) + ulp / 2 ? inf_code : max_finite_code;
    return static_cast<std::uint16_t>(c | (neg ? 0x8000 : 0));
  }
  while (hi - lo > 1) {  // decode(lo) <= a < decode(hi)
    const std::uint16_t mid = static_cast<std::uint16_t>((lo + hi) / 2);
    if (decode(mid) <= a) lo = mid; else hi = mid;
  }
  const double dl = a - decode(lo), dh = decode(hi) - a;
  std::uint16_t c = dl < dh ? lo : dh < dl ? hi : ((lo & 1) ? hi : lo);
  return static_cast<std::uint16_t>(c | (neg ? 0x8000 : 0));
}

float float_of(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

void check_one(std::uint32_t u) {
  const float f = float_of(u);
  CAPTURE(u, f);
  if (std::isnan(f)) {
    REQUIRE(std::isnan(static_cast<float>(rcclx::bf16(f))));
    REQUIRE(std::isnan(static_cast<float>(rcclx::fp16(f))));
    return;
  }
  REQUIRE(rcclx::bf16(f).bits == reference_encode(f, decode_bf16, 0x7F7F, 0x7F80));
  REQUIRE(rcclx::fp16(f).bits == reference_encode(f, decode_fp16, 0x7BFF, 0x7C00));
}

}  // namespace

TEST_CASE("bf16/fp16 decode every pattern like the formula", "[types]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const auto b = static_cast<std::uint16_t>(h);
    const double rb = decode_bf16(b), rh = decode_fp16(b);
    const float fb = static_cast<float>(rcclx::bf16::from_bits(b));
    const float fh = static_cast<float>(rcclx::fp16::from_bits(b));
    if (std::isnan(rb)) REQUIRE(std::isnan(fb)); else REQUIRE(static_cast<double>(fb) == rb);
    if (std::isnan(rh)) REQUIRE(std::isnan(fh)); else REQUIRE(static_cast<double>(fh) == rh);
  }
}

TEST_CASE("bf16/fp16 encode rounds to nearest even like the reference", "[types]") {
  // Round trips of every code, the midpoints between neighbours, and a random sample.
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const double v = decode_fp16(static_cast<std::uint16_t>(h));
    if (std::isfinite(v)) check_one([&] { float f = static_cast<float>(v); std::uint32_t u; std::memcpy(&u, &f, 4); return u; }());
  }
  for (std::uint32_t u = 0; u < 0xFFFFFFFFu - (1u << 16); u += (1u << 16) - 1) check_one(u);
  for (std::uint32_t u = 0; u < (1u << 16); ++u) {  // bf16 midpoints: low half exactly 0x8000 etc.
    check_one((u << 16) | 0x8000u);
    check_one((u << 16) | 0x7FFFu);
    check_one((u << 16) | 0x8001u);
  }
  std::mt19937 rng(12345);
  for (int i = 0; i < 200000; ++i) check_one(static_cast<std::uint32_t>(rng()));
  for (std::uint32_t m = 0; m < 8192; ++m) {  // fp16 rounding boundaries across the exponent range
    for (std::uint32_t e = 100; e < 145; ++e) check_one((e << 23) | (m << 10) | 0x1000u);
  }
}
