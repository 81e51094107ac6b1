// Scalar FP8 codecs against the independent reference of reference.hpp: decode of all 256 codes,
// encode in both overflow modes over all 65536 bf16 patterns, a strided sweep of float32 patterns,
// and every rounding boundary (code values, midpoints, +-1 and +-2 ulps around them), plus a
// table of hand-checked bytes; stochastic rounding against the reference and for unbiasedness.
#include <rcclx/fp8/fp8.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {
namespace f8 = rcclx::fp8;
using fp8_ref::bits;
using fp8_ref::from_bits;
using formats = std::tuple<f8::e4m3, f8::e5m2, f8::e4m3_fnuz, f8::e5m2_fnuz>;

#if defined(__SANITIZE_THREAD__)
constexpr int sweep_shift = 13;  // every 2^13-th float32 pattern (ThreadSanitizer is slow)
#else
constexpr int sweep_shift = 10;  // every 2^10-th: 4M patterns
#endif

// Collects mismatches and reports the first few in one failure.
struct mismatches {
  std::uint64_t count = 0;
  std::ostringstream first;
  void add(const std::string& what) {
    if (count++ < 8) first << "  " << what << "\n";
  }
};

std::string hex(std::uint32_t v, int w = 8) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%0*X", w, v);
  return b;
}

template <class F, f8::overflow M, f8::path P>
void check_encode(const std::vector<float>& inputs, mismatches& mm) {
  const auto& t = fp8_ref::table_of<F>();
  const auto md = M == f8::overflow::saturate ? fp8_ref::mode::saturate : fp8_ref::mode::propagate;
  for (float x : inputs) {
    const std::uint8_t want = t.encode(x, md);
    const std::uint8_t got = f8::encode<F, M, P>(x);
    if (got != want)
      mm.add(std::string(t.p.name) + (M == f8::overflow::saturate ? " saturate" : " propagate") + " x=" +
             hex(bits(x)) + " (" + std::to_string(x) + ") got " + hex(got, 2) + " want " + hex(want, 2));
  }
}

template <class F>
void check_all_modes(const std::vector<float>& inputs) {
  mismatches mm;
  check_encode<F, f8::overflow::saturate, f8::path::automatic>(inputs, mm);
  check_encode<F, f8::overflow::saturate, f8::path::software>(inputs, mm);
  check_encode<F, f8::overflow::propagate, f8::path::automatic>(inputs, mm);
  check_encode<F, f8::overflow::propagate, f8::path::software>(inputs, mm);
  INFO(inputs.size() << " inputs, first mismatches:\n" << mm.first.str());
  REQUIRE(mm.count == 0);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("fp8 traits match the format table of numerics.md", "[fp8]", formats) {
  using T = f8::format_traits<TestType>;
  const auto& t = fp8_ref::table_of<TestType>();
  REQUIRE(t.max_code == T::max_code);
  REQUIRE(t.values[t.max_code] == double(T::max_finite));
  REQUIRE(t.values[1] == double(T::min_subnormal));
  REQUIRE(t.values[std::size_t(1) << T::mantissa_bits] == double(T::min_normal));
  REQUIRE(fp8_ref::decode(t.p, T::nan_code) != fp8_ref::decode(t.p, T::nan_code));  // NaN
  REQUIRE(t.p.bias == T::bias);
  REQUIRE(T::has_negative_zero == !t.p.fnuz);
  if (T::has_inf) REQUIRE(std::isinf(fp8_ref::decode(t.p, T::inf_code)));
  for (int c = 0; c < 256; ++c) {
    const double v = fp8_ref::decode(t.p, static_cast<std::uint8_t>(c));
    CAPTURE(c);
    REQUIRE(f8::is_nan_code<TestType>(static_cast<std::uint8_t>(c)) == std::isnan(v));
    REQUIRE(f8::is_inf_code<TestType>(static_cast<std::uint8_t>(c)) == std::isinf(v));
  }
}

TEST_CASE("fp8 traits: the numbers of the design table", "[fp8]") {
  REQUIRE(f8::format_traits<f8::e4m3>::max_finite == 448.0f);
  REQUIRE(f8::format_traits<f8::e5m2>::max_finite == 57344.0f);
  REQUIRE(f8::format_traits<f8::e4m3_fnuz>::max_finite == 240.0f);
  REQUIRE(f8::format_traits<f8::e5m2_fnuz>::max_finite == 57344.0f);
  REQUIRE(f8::format_traits<f8::e4m3>::bias == 7);
  REQUIRE(f8::format_traits<f8::e5m2>::bias == 15);
  REQUIRE(f8::format_traits<f8::e4m3_fnuz>::bias == 8);
  REQUIRE(f8::format_traits<f8::e5m2_fnuz>::bias == 16);
  // 1.0 in each format
  REQUIRE(f8::decode<f8::e4m3>(0x38) == 1.0f);
  REQUIRE(f8::decode<f8::e5m2>(0x3C) == 1.0f);
  REQUIRE(f8::decode<f8::e4m3_fnuz>(0x40) == 1.0f);
  REQUIRE(f8::decode<f8::e5m2_fnuz>(0x40) == 1.0f);
}

TEMPLATE_LIST_TEST_CASE("fp8 decode: all 256 codes match the formula", "[fp8]", formats) {
  const auto& t = fp8_ref::table_of<TestType>();
  for (int c = 0; c < 256; ++c) {
    const double want = fp8_ref::decode(t.p, static_cast<std::uint8_t>(c));
    const float sw = f8::decode<TestType, f8::path::software>(static_cast<std::uint8_t>(c));
    const float hw = f8::decode<TestType>(static_cast<std::uint8_t>(c));
    CAPTURE(c, want, sw, hw);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(sw));
      REQUIRE(std::isnan(hw));
    } else {
      // Exact, including the sign of zero.
      REQUIRE(bits(sw) == bits(static_cast<float>(want)));
      REQUIRE(bits(hw) == bits(static_cast<float>(want)));
      REQUIRE(static_cast<double>(sw) == want);
    }
  }
}

TEMPLATE_LIST_TEST_CASE("fp8 encode: all 65536 bf16 patterns, both modes", "[fp8]", formats) {
  std::vector<float> in(65536);
  for (std::uint32_t i = 0; i < 65536; ++i) in[i] = from_bits(i << 16);
  check_all_modes<TestType>(in);
  // The bf16 overload gives the same bytes.
  const auto& t = fp8_ref::table_of<TestType>();
  std::uint64_t bad = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const auto h = rcclx::bf16::from_bits(static_cast<std::uint16_t>(i));
    bad += f8::encode<TestType>(h) != t.encode(in[i], fp8_ref::mode::saturate);
    bad += f8::encode<TestType, f8::overflow::propagate>(h) != t.encode(in[i], fp8_ref::mode::propagate);
  }
  REQUIRE(bad == 0);
}

TEMPLATE_LIST_TEST_CASE("fp8 encode: strided float32 sweep, both modes", "[fp8]", formats) {
  std::vector<float> in;
  const std::uint32_t count = std::uint32_t(1) << (32 - sweep_shift);
  in.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    // Every 2^k-th pattern, with the low bits varied so rounding bits are exercised too.
    const std::uint32_t low = (i * 2654435761u) >> (32 - sweep_shift);
    in.push_back(from_bits((i << sweep_shift) | low));
  }
  check_all_modes<TestType>(in);
}

TEMPLATE_LIST_TEST_CASE("fp8 encode: rounding boundaries, both modes", "[fp8]", formats) {
  const auto in = fp8_ref::boundary_inputs(fp8_ref::table_of<TestType>());
  REQUIRE(in.size() > 1000);
  check_all_modes<TestType>(in);
}

TEST_CASE("fp8 encode: hand-checked bytes", "[fp8]") {
  using f8::overflow;
  const float nan = from_bits(0x7FC00000u), neg_nan = from_bits(0xFFC00000u), inf = HUGE_VALF;
  const float above464 = std::nextafter(464.0f, 1e9f), below61440 = std::nextafter(61440.0f, 0.0f);
  // e4m3: 464 is the tie between 448 (0x7E, even) and the would-be 480: stays 448.
  CHECK(f8::encode<f8::e4m3>(448.0f) == 0x7E);
  CHECK(f8::encode<f8::e4m3, overflow::propagate>(464.0f) == 0x7E);
  CHECK(f8::encode<f8::e4m3, overflow::propagate>(above464) == 0x7F);
  CHECK(f8::encode<f8::e4m3, overflow::propagate>(-above464) == 0xFF);
  CHECK(f8::encode<f8::e4m3>(above464) == 0x7E);
  CHECK(f8::encode<f8::e4m3>(-1e30f) == 0xFE);
  CHECK(f8::encode<f8::e4m3>(inf) == 0x7E);
  CHECK(f8::encode<f8::e4m3, overflow::propagate>(-inf) == 0xFF);
  CHECK(f8::encode<f8::e4m3>(nan) == 0x7F);
  CHECK(f8::encode<f8::e4m3>(neg_nan) == 0x7F);                      // saturate: sign dropped (NVIDIA)
  CHECK(f8::encode<f8::e4m3, overflow::propagate>(neg_nan) == 0xFF);  // propagate: sign kept (PyTorch)
  CHECK(f8::encode<f8::e4m3>(-0.0f) == 0x80);
  CHECK(f8::encode<f8::e4m3>(-1e-30f) == 0x80);
  CHECK(f8::encode<f8::e4m3>(0x1p-10f) == 0x00);                      // half the smallest subnormal: tie to 0
  CHECK(f8::encode<f8::e4m3>(std::nextafter(0x1p-10f, 1.0f)) == 0x01);
  CHECK(f8::encode<f8::e4m3>(3 * 0x1p-10f) == 0x02);                  // tie between 1 and 2: even
  CHECK(f8::encode<f8::e4m3>(1.0f) == 0x38);
  // e5m2: max 57344 (0x7B, odd mantissa): the tie at 61440 overflows.
  CHECK(f8::encode<f8::e5m2, overflow::propagate>(below61440) == 0x7B);
  CHECK(f8::encode<f8::e5m2, overflow::propagate>(61440.0f) == 0x7C);
  CHECK(f8::encode<f8::e5m2, overflow::propagate>(-61440.0f) == 0xFC);
  CHECK(f8::encode<f8::e5m2>(61440.0f) == 0x7B);
  CHECK(f8::encode<f8::e5m2>(inf) == 0x7B);
  CHECK(f8::encode<f8::e5m2>(-inf) == 0xFB);
  CHECK(f8::encode<f8::e5m2, overflow::propagate>(inf) == 0x7C);
  CHECK(f8::encode<f8::e5m2>(nan) == 0x7F);
  CHECK(f8::encode<f8::e5m2, overflow::propagate>(neg_nan) == 0xFF);
  // e4m3_fnuz: max 240 (0x7F, odd): 248 overflows; no -0.
  CHECK(f8::encode<f8::e4m3_fnuz>(240.0f) == 0x7F);
  CHECK(f8::encode<f8::e4m3_fnuz, overflow::propagate>(std::nextafter(248.0f, 0.0f)) == 0x7F);
  CHECK(f8::encode<f8::e4m3_fnuz, overflow::propagate>(248.0f) == 0x80);
  CHECK(f8::encode<f8::e4m3_fnuz, overflow::propagate>(-248.0f) == 0x80);
  CHECK(f8::encode<f8::e4m3_fnuz>(-248.0f) == 0xFF);
  CHECK(f8::encode<f8::e4m3_fnuz>(-0.0f) == 0x00);
  CHECK(f8::encode<f8::e4m3_fnuz>(-1e-30f) == 0x00);
  CHECK(f8::encode<f8::e4m3_fnuz>(-0x1p-11f) == 0x00);
  CHECK(f8::encode<f8::e4m3_fnuz>(std::nextafter(-0x1p-11f, -1.0f)) == 0x81);
  CHECK(f8::encode<f8::e4m3_fnuz>(nan) == 0x80);
  CHECK(f8::encode<f8::e4m3_fnuz>(inf) == 0x7F);
  CHECK(f8::encode<f8::e4m3_fnuz, overflow::propagate>(-inf) == 0x80);
  // e5m2_fnuz
  CHECK(f8::encode<f8::e5m2_fnuz>(57344.0f) == 0x7F);
  CHECK(f8::encode<f8::e5m2_fnuz, overflow::propagate>(61440.0f) == 0x80);
  CHECK(f8::encode<f8::e5m2_fnuz, overflow::propagate>(below61440) == 0x7F);
  CHECK(f8::encode<f8::e5m2_fnuz>(-0.0f) == 0x00);
  CHECK(f8::encode<f8::e5m2_fnuz>(-0x1p-18f) == 0x00);
  // Decoding the specials.
  CHECK(std::isnan(f8::decode<f8::e4m3>(0xFF)));
  CHECK(std::isnan(f8::decode<f8::e4m3_fnuz>(0x80)));
  CHECK(std::isnan(f8::decode<f8::e5m2_fnuz>(0x80)));
  CHECK(f8::decode<f8::e5m2>(0xFC) == -inf);
  CHECK(std::signbit(f8::decode<f8::e4m3>(0x80)));
}

TEMPLATE_LIST_TEST_CASE("fp8 encode_sr: matches the reference, exact codes stay, unbiased", "[fp8]", formats) {
  const auto& t = fp8_ref::table_of<TestType>();
  std::mt19937 rng(1234);
  auto in = fp8_ref::boundary_inputs(t);
  for (std::uint32_t i = 0; i < 65536; ++i) in.push_back(from_bits(i << 16 | (rng() & 0xFFFF)));
  mismatches mm;
  for (float x : in) {
    for (std::uint32_t r : {0u, 1u, 0x7FFFFFFFu, 0x80000000u, 0xFFFFFFFFu, static_cast<std::uint32_t>(rng()),
                            static_cast<std::uint32_t>(rng())}) {
      const auto want_s = t.encode_sr(x, r, fp8_ref::mode::saturate);
      const auto want_p = t.encode_sr(x, r, fp8_ref::mode::propagate);
      const auto got_s = f8::encode_sr<TestType>(x, r);
      const auto got_p = f8::encode_sr<TestType, f8::overflow::propagate>(x, r);
      if (got_s != want_s || got_p != want_p)
        mm.add("x=" + hex(bits(x)) + " r=" + hex(r) + " got " + hex(got_s, 2) + "/" + hex(got_p, 2) + " want " +
               hex(want_s, 2) + "/" + hex(want_p, 2));
    }
  }
  INFO(mm.first.str());
  REQUIRE(mm.count == 0);

  // Codes are fixed points whatever the random bits.
  for (int c = 0; c <= t.max_code; ++c) {
    const float v = static_cast<float>(t.values[c]);
    REQUIRE(f8::encode_sr<TestType>(v, 0xFFFFFFFFu) == c);
    REQUIRE(f8::encode_sr<TestType>(v, 0u) == c);
  }
  // Unbiased: the mean of the decoded results over a uniform grid of random words is x to within
  // the 2^-32 truncation of the probability (here 2^-12 from the grid).
  for (double frac : {0.1, 0.25, 0.5, 0.7, 0.999}) {
    const int lo = t.max_code / 2;
    const double step = t.values[lo + 1] - t.values[lo];
    const float x = static_cast<float>(t.values[lo] + frac * step);
    double sum = 0;
    const int n = 4096;
    for (int k = 0; k < n; ++k) sum += f8::decode<TestType>(f8::encode_sr<TestType>(x, std::uint32_t(k) << 20));
    CAPTURE(frac, x, sum / n);
    REQUIRE(std::fabs(sum / n - double(x)) <= step / n);
  }
}
