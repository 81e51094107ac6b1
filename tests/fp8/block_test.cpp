// Block scaling: round-trip error within the bound of docs/numerics.md for every format and scale
// kind (random blocks over the whole float range, zero/denormal/FLT_MAX blocks), no NaN or Inf
// from finite input, NaN/Inf elements handled as documented; the bulk kernels equal the one-thread
// functor computed on the host (tails, odd sizes, both element types), never write outside [0, n),
// and reject bad pointers. On a GPU the same source checks the device kernels and the
// multi-lane fragment form against the host.
#include <rcclx/fp8/block_scale.hpp>
#include <rcclx/fp8/quantize_blocks.hpp>
#include <rcclx/testing/launch.hpp>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "../support/catch.hpp"
#include "reference.hpp"

namespace {
namespace f8 = rcclx::fp8;
using f8::scale_kind;
using fp8_ref::bits;
using fp8_ref::from_bits;

template <class F, int B, scale_kind S>
struct cfg {
  using format = F;
  static constexpr int block = B;
  static constexpr scale_kind scale = S;
  using quant = f8::block_quantize<F, B, S, f8::path::software>;
  using dequant = f8::block_dequantize<F, B, S, f8::path::software>;
  using scale_type = f8::scale_type_t<S>;
};
using block_cfgs =
    std::tuple<cfg<f8::e4m3, 32, scale_kind::fp32>, cfg<f8::e4m3, 32, scale_kind::e8m0>,
               cfg<f8::e5m2, 32, scale_kind::fp32>, cfg<f8::e5m2, 32, scale_kind::e8m0>,
               cfg<f8::e4m3_fnuz, 32, scale_kind::fp32>, cfg<f8::e4m3_fnuz, 32, scale_kind::e8m0>,
               cfg<f8::e5m2_fnuz, 32, scale_kind::fp32>, cfg<f8::e5m2_fnuz, 32, scale_kind::e8m0>,
               cfg<f8::e4m3, 16, scale_kind::fp32>, cfg<f8::e4m3, 128, scale_kind::e8m0>>;

double scale_value(float s) { return s; }
double scale_value(f8::e8m0 s) { return std::ldexp(1.0, s.exponent()); }

// The documented bound (docs/numerics.md) for one element with dequantization multiplier `scale`.
template <class F, scale_kind S>
double element_bound(double x, double scale) {
  using T = f8::format_traits<F>;
  const int m = T::mantissa_bits;
  const double ax = std::fabs(x);
  const double h = std::ldexp(1.0, T::min_exponent - m - 1);  // half the subnormal step
  const double base = std::max(std::ldexp(ax, -(m + 1)), h * scale);
  if (S == scale_kind::fp32) return base * (1 + std::ldexp(1.0, -21)) + std::ldexp(ax, -21);
  // E8M0: exact rescaling; only values within a hair of FLT_MAX saturate one step lower.
  if (ax > (2 - std::ldexp(1.0, -(m + 1))) * std::ldexp(1.0, 127)) return std::ldexp(1.0, 127 - m);
  return base;
}

// Per block, relative to the block's amax (not applicable to blocks whose scale hit its floor).
template <class F, scale_kind S>
double block_bound_factor() {
  using T = f8::format_traits<F>;
  const double step_top = std::ldexp(1.0, T::max_exponent - T::mantissa_bits);  // code step of the top binade
  if (S == scale_kind::fp32) return step_top / 2 / T::max_finite * (1 + std::ldexp(1.0, -20));
  return step_top / T::max_finite;
}

struct failures {
  std::uint64_t count = 0;
  std::ostringstream first;
  template <class... A>
  void add(const A&... a) {
    if (count++ < 8) {
      (first << ... << a);
      first << "\n";
    }
  }
};

// Random blocks: per-block magnitude 2^e with e uniform over the whole float range, random signs
// and mantissas, some zeros; plus hand-made edge blocks.
std::vector<std::vector<float>> make_blocks(int block, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<float>> out;
  auto uni = [&] { return std::uniform_real_distribution<double>(0, 1)(rng); };
  for (int b = 0; b < 2000; ++b) {
    const int e = static_cast<int>(rng() % 280) - 150;
    const int spread = static_cast<int>(rng() % 30);
    std::vector<float> v(block);
    for (auto& x : v) {
      if (rng() % 16 == 0) { x = 0.0f; continue; }
      const double mag = std::ldexp(1 + uni(), e - static_cast<int>(rng() % (spread + 1)));
      x = static_cast<float>(std::min(mag, double(FLT_MAX)) * (rng() % 2 ? -1 : 1));
    }
    out.push_back(v);
  }
  auto fill = [&](float value) { return std::vector<float>(block, value); };
  out.push_back(fill(0.0f));
  out.push_back(fill(-0.0f));
  out.push_back(fill(FLT_MAX));
  out.push_back(fill(-FLT_MAX));
  out.push_back(fill(from_bits(1)));           // smallest denormal
  out.push_back(fill(from_bits(0x007FFFFFu))); // largest denormal
  out.push_back(fill(FLT_MIN));
  out.push_back(fill(1.0f));
  std::vector<float> v = fill(0.0f);
  v[block - 1] = 3.0f;
  out.push_back(v);
  v = fill(1e-30f);
  v[0] = FLT_MAX;
  out.push_back(v);
  v = fill(-1.0f);
  for (int i = 0; i < block; i += 2) v[i] = 3.3e38f;
  out.push_back(v);
  for (float t : {448.0f * 0x1p-126f, 240.0f * 0x1p-126f, 57344.0f * 0x1p-126f, 3.3e38f, 3.39e38f, 1.9375f * 0x1p127f}) {
    out.push_back(fill(t));
    out.push_back(fill(std::nextafter(t, 0.0f)));
    out.push_back(fill(std::nextafter(t, FLT_MAX)));
  }
  return out;
}

// Test inputs as T; for bf16, values beyond bf16's largest finite (0x7F7F) are clamped to it so
// that every input stays finite.
template <class T>
T to_element(float x) {
  if (std::is_same<T, rcclx::bf16>::value) {
    const float bmax = from_bits(0x7F7F0000u);
    if (std::fabs(x) > bmax) x = std::copysign(bmax, x);
  }
  return f8::detail::from_float<T>(x);
}

template <class C, class T>
void check_round_trip(const std::vector<std::vector<float>>& blocks) {
  using F = typename C::format;
  using traits = f8::format_traits<F>;
  failures fails;
  std::vector<T> in(C::block), back(C::block);
  std::vector<std::uint8_t> codes(C::block);
  for (const auto& blk : blocks) {
    for (int i = 0; i < C::block; ++i) in[i] = to_element<T>(blk[i]);
    const auto s = typename C::quant{}(in.data(), codes.data());
    typename C::dequant{}(codes.data(), s, back.data());
    const double sv = scale_value(s);
    double amax = 0;
    for (int i = 0; i < C::block; ++i) amax = std::max(amax, std::fabs(double(f8::detail::to_float(in[i]))));
    if (!(sv > 0) || !std::isfinite(sv)) fails.add("scale not positive finite: ", sv);
    if (C::scale == scale_kind::fp32 && sv < std::ldexp(1.0, -126)) fails.add("fp32 scale below 2^-126: ", sv);
    const double floor_amax = traits::max_finite * std::ldexp(1.0, -126);
    if (C::scale == scale_kind::e8m0 && amax >= floor_amax) {
      // k is the smallest with amax / 2^k <= max_finite
      if (!(amax / sv <= traits::max_finite && amax / sv * 2 > traits::max_finite))
        fails.add("e8m0 exponent not minimal: amax ", amax, " scale ", sv);
    }
    for (int i = 0; i < C::block; ++i) {
      const double x = f8::detail::to_float(in[i]);
      const double y = f8::detail::to_float(back[i]);
      if (f8::is_nan_code<F>(codes[i])) fails.add("NaN code from finite x=", x);
      if (!std::isfinite(y)) { fails.add("non-finite output ", y, " from x=", x); continue; }
      // The output type's own rounding: float32 below 2^-126 rounds to multiples of 2^-149; bf16
      // adds half a bf16 ulp (2^-9 relative, 2^-134 absolute in its denormal range).
      const double extra = std::is_same<T, rcclx::bf16>::value ? std::ldexp(std::fabs(y), -8) + std::ldexp(1.0, -134)
                                                               : std::ldexp(1.0, -150);
      const double bound = element_bound<F, C::scale>(x, sv) + extra;
      if (std::fabs(y - x) > bound) fails.add("x=", x, " y=", y, " err ", std::fabs(y - x), " > bound ", bound, " scale ", sv);
      if (amax >= floor_amax && std::fabs(y - x) > block_bound_factor<F, C::scale>() * amax + extra &&
          std::fabs(x) <= (2 - std::ldexp(1.0, -(traits::mantissa_bits + 1))) * std::ldexp(1.0, 127))
        fails.add("block bound: x=", x, " y=", y, " amax ", amax);
    }
  }
  INFO(fails.first.str());
  REQUIRE(fails.count == 0);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("block scaling: round trip within the documented bound, finite stays finite", "[fp8][block]",
                        block_cfgs) {
  const auto blocks = make_blocks(TestType::block, 42);
  check_round_trip<TestType, float>(blocks);
  // bf16 inputs (the blocks rounded to bf16 first): same bounds plus the bf16 output rounding.
  check_round_trip<TestType, rcclx::bf16>(blocks);
}

TEMPLATE_LIST_TEST_CASE("block scaling: fragment form with one lane equals the memory form", "[fp8][block]",
                        block_cfgs) {
  using C = TestType;
  const auto blocks = make_blocks(C::block, 7);
  for (const auto& blk : blocks) {
    float x[C::block];
    for (int i = 0; i < C::block; ++i) x[i] = blk[i];
    std::uint8_t codes[C::block];
    const auto s1 = typename C::quant{}(static_cast<const float*>(x), codes);
    f8::packed<C::block> q;
    const auto s2 = f8::block_quantize<typename C::format, C::block, C::scale>{}(x, q);
    REQUIRE(std::memcmp(&s1, &s2, sizeof s1) == 0);
    for (int i = 0; i < C::block; ++i) REQUIRE(q[i] == codes[i]);
    float y[C::block];
    f8::block_dequantize<typename C::format, C::block, C::scale>{}(q, s2, y);
    for (int i = 0; i < C::block; ++i) {
      const float z = f8::decode<typename C::format>(codes[i]) *
                      static_cast<float>(f8::block_scale<typename C::format, C::scale>::dequant_multiplier(s2));
      REQUIRE(bits(y[i]) == bits(z));
    }
  }
}

TEST_CASE("block scaling: NaN and Inf elements", "[fp8][block]") {
  using Q = f8::block_quantize<f8::e4m3, 32>;
  using D = f8::block_dequantize<f8::e4m3, 32>;
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * float(i);  // amax 7.75
  x[3] = from_bits(0x7FC00000u);
  x[4] = HUGE_VALF;
  x[5] = -HUGE_VALF;
  std::uint8_t q[32];
  const float s = Q{}(static_cast<const float*>(x), q);
  REQUIRE(s == 7.75f / 448.0f);  // amax of the finite elements only
  float y[32];
  D{}(q, s, y);
  REQUIRE(std::isnan(y[3]));
  REQUIRE(y[4] == 448.0f * s);  // +-Inf saturate to +-max * scale
  REQUIRE(y[5] == -448.0f * s);
  for (int i = 6; i < 32; ++i) REQUIRE(std::fabs(y[i] - x[i]) <= x[i] / 16);
  // An all-NaN block: scale from amax 0 (the floor), every element NaN.
  for (auto& v : x) v = from_bits(0xFFC00000u);
  const float s2 = Q{}(static_cast<const float*>(x), q);
  REQUIRE(s2 == 0x1p-126f);
  D{}(q, s2, y);
  for (float v : y) REQUIRE(std::isnan(v));
}

TEST_CASE("block scaling: scale edge cases", "[fp8][block]") {
  using S32 = f8::block_scale<f8::e4m3, scale_kind::fp32>;
  using S8 = f8::block_scale<f8::e4m3, scale_kind::e8m0>;
  REQUIRE(S32::from_amax(0.0f).stored == 0x1p-126f);
  REQUIRE(S32::from_amax(0.0f).quant_multiplier == 0x1p126f);
  REQUIRE(S32::from_amax(448.0f).stored == 1.0f);
  REQUIRE(std::isfinite(S32::from_amax(FLT_MAX).stored * 448.0f));
  REQUIRE(S32::from_amax(HUGE_VALF).stored == S32::from_amax(FLT_MAX).stored);
  REQUIRE(S8::from_amax(0.0f).stored.exponent() == -126);
  REQUIRE(S8::from_amax(448.0f).stored.exponent() == 0);
  REQUIRE(S8::from_amax(449.0f).stored.exponent() == 1);
  REQUIRE(S8::from_amax(224.0f).stored.exponent() == -1);  // 224 * 2 = 448 fits
  REQUIRE(S8::from_amax(224.1f).stored.exponent() == 0);
  REQUIRE(S8::from_amax(112.0f).stored.exponent() == -2);
  REQUIRE(S8::from_amax(FLT_MAX).stored.exponent() == 120);
  REQUIRE(S8::from_amax(FLT_MAX).quant_limit == 240.0f);  // 240 * 2^120 < FLT_MAX < 256 * 2^120
  REQUIRE(f8::e8m0{0}.to_float() == 0x1p-127f);
  REQUIRE(std::isnan(f8::e8m0{0xFF}.to_float()));
  REQUIRE(f8::e8m0{127}.to_float() == 1.0f);
}

TEST_CASE("block layout: sizes and offsets", "[fp8][block]") {
  using L = f8::block_layout<32, scale_kind::fp32>;
  using L8 = f8::block_layout<32, scale_kind::e8m0>;
  REQUIRE(L::num_blocks(0) == 0);
  REQUIRE(L::num_blocks(1) == 1);
  REQUIRE(L::num_blocks(64) == 2);
  REQUIRE(L::num_blocks(65) == 3);
  REQUIRE(L::scale_bytes(65) == 12);
  REQUIRE(L8::scale_bytes(65) == 3);
  REQUIRE(L::payload_bytes(65) == 65);
  REQUIRE(L::scales_offset(65) == 80);
  REQUIRE(L::total_bytes(65) == 96);
  REQUIRE(L8::total_bytes(65) == 96);
  REQUIRE(L::total_bytes(1 << 20) == (1u << 20) + (1u << 20) / 8);
  alignas(16) unsigned char buf[96];
  REQUIRE(reinterpret_cast<unsigned char*>(L::scales(buf, 65)) == buf + 80);
}

// ---- bulk kernels -------------------------------------------------------------------------------
namespace {

template <class T>
std::vector<T> bulk_input(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const int e = static_cast<int>((i / 32 * 2654435761u) % 200) - 100;  // per-block magnitude
    float x = std::ldexp(static_cast<float>(rng() % 100000) / 50000.0f - 1.0f, e);
    if (rng() % 97 == 0) x = 0.0f;
    if (i % 1009 == 5) x = from_bits(0x7FC00000u);
    if (i % 2003 == 7) x = -HUGE_VALF;
    if (i / 32 % 61 == 3) x = std::ldexp(static_cast<float>(rng() % 1000) / 1000.0f, 128);  // near FLT_MAX
    v[i] = f8::detail::from_float<T>(x);
  }
  return v;
}

struct device_buffer {
  void* p;
  explicit device_buffer(std::size_t bytes) : p(rcclx::gpu::device_malloc(bytes)) {}
  ~device_buffer() { rcclx::gpu::device_free(p); }
  template <class U> U* as() const { return static_cast<U*>(p); }
};

// QT / DT: the fp8::bulk_tuning of the quantize / dequantize launch (void = the default).
// Threads > 0 (host backend only): the _range bodies called for thread ids [0, Threads) in turn.
template <class C, class T, class QT = void, class DT = void, int Threads = 0>
void check_bulk(std::size_t n) {
  using F = typename C::format;
  using ST = typename C::scale_type;
  using L = f8::block_layout<C::block, C::scale>;
  CAPTURE(n, sizeof(T));
  const auto in = bulk_input<T>(n, static_cast<std::uint32_t>(n));
  const std::size_t nb = L::num_blocks(n), pad = 64;
  // Host reference: the one-thread functor, block by block, software path.
  std::vector<std::uint8_t> want_q(n);
  std::vector<ST> want_s(nb);
  std::vector<T> want_y(n);
  for (std::size_t b = 0; b < nb; ++b) {
    const int count = static_cast<int>(std::min<std::size_t>(C::block, n - b * C::block));
    want_s[b] = typename C::quant{}(in.data() + b * C::block, want_q.data() + b * C::block, count);
    typename C::dequant{}(want_q.data() + b * C::block, want_s[b], want_y.data() + b * C::block, count);
  }
  device_buffer d_in(n * sizeof(T) + 16), d_q(n + pad), d_s((nb + pad) * sizeof(ST)), d_y((n + pad) * sizeof(T));
  rcclx::gpu::copy(d_in.p, in.data(), n * sizeof(T));
  std::vector<unsigned char> sentinel((n + pad) * sizeof(T) + (nb + pad) * sizeof(ST), 0xA5);
  rcclx::gpu::copy(d_q.p, sentinel.data(), n + pad);
  rcclx::gpu::copy(d_s.p, sentinel.data(), (nb + pad) * sizeof(ST));
  rcclx::gpu::copy(d_y.p, sentinel.data(), (n + pad) * sizeof(T));
  if constexpr (Threads > 0) {
    using QR = std::conditional_t<std::is_void<QT>::value, typename f8::detail::bulk_defaults<T, C::scale>::quantize, QT>;
    using DR = std::conditional_t<std::is_void<DT>::value, typename f8::detail::bulk_defaults<T, C::scale>::dequantize, DT>;
    for (int t = 0; t < Threads; ++t)
      f8::quantize_blocks_range<F, C::block, C::scale, f8::path::automatic, T, QR>(
          d_in.as<T>(), n, d_q.as<std::uint8_t>(), d_s.as<ST>(), t, Threads);
    for (int t = Threads - 1; t >= 0; --t)
      f8::dequantize_blocks_range<F, C::block, C::scale, f8::path::automatic, T, DR>(
          d_q.as<std::uint8_t>(), d_s.as<ST>(), n, d_y.as<T>(), t, Threads);
  } else if constexpr (std::is_void<QT>::value) {
    f8::quantize_blocks<F, C::block, C::scale>(d_in.as<T>(), n, d_q.as<std::uint8_t>(), d_s.as<ST>());
    f8::dequantize_blocks<F, C::block, C::scale>(d_q.as<std::uint8_t>(), d_s.as<ST>(), n, d_y.as<T>());
  } else {
    f8::quantize_blocks<F, C::block, C::scale, f8::path::automatic, T, QT>(d_in.as<T>(), n, d_q.as<std::uint8_t>(),
                                                                          d_s.as<ST>());
    f8::dequantize_blocks<F, C::block, C::scale, f8::path::automatic, T, DT>(d_q.as<std::uint8_t>(), d_s.as<ST>(), n,
                                                                            d_y.as<T>());
  }
  rcclx::gpu::device_synchronize();
  std::vector<std::uint8_t> got_q(n + pad);
  std::vector<ST> got_s(nb + pad);
  std::vector<T> got_y(n + pad);
  rcclx::gpu::copy(got_q.data(), d_q.p, n + pad);
  rcclx::gpu::copy(got_s.data(), d_s.p, (nb + pad) * sizeof(ST));
  rcclx::gpu::copy(got_y.data(), d_y.p, (n + pad) * sizeof(T));
  failures fails;
  for (std::size_t i = 0; i < n; ++i)
    if (got_q[i] != want_q[i]) fails.add("code ", i, ": got ", int(got_q[i]), " want ", int(want_q[i]));
  for (std::size_t b = 0; b < nb; ++b)
    if (std::memcmp(&got_s[b], &want_s[b], sizeof(ST)) != 0) fails.add("scale ", b, " differs");
  for (std::size_t i = 0; i < n; ++i) {
    const float g = f8::detail::to_float(got_y[i]), w = f8::detail::to_float(want_y[i]);
    if (bits(g) != bits(w) && !(std::isnan(g) && std::isnan(w))) fails.add("value ", i, ": got ", g, " want ", w);
  }
  for (std::size_t i = n; i < n + pad; ++i)
    if (got_q[i] != 0xA5) fails.add("payload written past n at ", i);
  const auto* sb = reinterpret_cast<const unsigned char*>(got_s.data());
  for (std::size_t i = nb * sizeof(ST); i < (nb + pad) * sizeof(ST); ++i)
    if (sb[i] != 0xA5) fails.add("scale written past the last block at byte ", i);
  const auto* yb = reinterpret_cast<const unsigned char*>(got_y.data());
  for (std::size_t i = n * sizeof(T); i < (n + pad) * sizeof(T); ++i)
    if (yb[i] != 0xA5) fails.add("output written past n at byte ", i);
  INFO(fails.first.str());
  REQUIRE(fails.count == 0);
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("quantize_blocks / dequantize_blocks equal the per-block functor", "[fp8][block][bulk]",
                        block_cfgs) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
#if defined(__SANITIZE_THREAD__)
  const std::size_t big = 4099;
#else
  // 4M elements on a GPU (a full device, many grid-stride rounds), fewer under compute-sanitizer.
  const std::size_t big = rcclx::current_backend == rcclx::backend::host || rcclx_test::scaled(100) < 100
                              ? 100003
                              : (std::size_t(1) << 22) + 77;
#endif
  for (std::size_t n : {std::size_t(1), std::size_t(3), std::size_t(4), std::size_t(15), std::size_t(16),
                        std::size_t(31), std::size_t(32), std::size_t(33), std::size_t(100), std::size_t(1000),
                        std::size_t(4099), big}) {
    check_bulk<TestType, float>(n);
    check_bulk<TestType, rcclx::bf16>(n);
  }
}

// Every tuning knob of the bulk kernels (rcclx-bench-fp8's sweep picks among them) gives the same
// bytes as the one-thread functor: unroll, lane width, cache hints, software prefetch, one tile
// per block, several waves, other block sizes, register bounds.
namespace {
template <class Q, class D>
struct tuning_pair {
  using quantize = Q;
  using dequantize = D;
};
using f8::bulk_tuning;
constexpr int PF = f8::bulk_prefetch, SS = f8::bulk_store_streaming, LS = f8::bulk_load_streaming,
              NL = f8::bulk_load_no_l1;
using tuning_pairs = std::tuple<
    tuning_pair<bulk_tuning<1>, bulk_tuning<1>>, tuning_pair<bulk_tuning<2, 0, PF>, bulk_tuning<2, 0, PF | SS>>,
    tuning_pair<bulk_tuning<3, 0, PF | SS | LS>, bulk_tuning<3, 0, PF | LS>>,
    tuning_pair<bulk_tuning<1, 16, PF>, bulk_tuning<1, 16, SS>>,
    tuning_pair<bulk_tuning<2, 0, NL, 0>, bulk_tuning<2, 0, NL | PF, 0>>,
    tuning_pair<bulk_tuning<1, 0, PF, 2, 128>, bulk_tuning<4, 0, SS | PF, 2, 512>>,
    tuning_pair<bulk_tuning<1, 0, PF, 1, 256, 8>, bulk_tuning<2, 0, SS | PF, 1, 256, 8>>,
    tuning_pair<f8::default_quantize_tuning<rcclx::bf16, scale_kind::fp32>,  // the defaults by their public names
                f8::default_dequantize_tuning<float, scale_kind::e8m0>>>;
}  // namespace

TEMPLATE_LIST_TEST_CASE("quantize_blocks / dequantize_blocks: every tuning equals the functor",
                        "[fp8][block][bulk][tuning]", tuning_pairs) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using Q = typename TestType::quantize;
  using D = typename TestType::dequantize;
  using C32 = cfg<f8::e4m3, 32, scale_kind::fp32>;
  using C8 = cfg<f8::e4m3, 32, scale_kind::e8m0>;
  using CF = cfg<f8::e4m3_fnuz, 32, scale_kind::fp32>;
#if defined(__SANITIZE_THREAD__)
  const std::size_t big = 4099;
#else
  const std::size_t big = rcclx::current_backend == rcclx::backend::host || rcclx_test::scaled(100) < 100
                              ? 20011
                              : (std::size_t(1) << 21) + 45;
#endif
  for (std::size_t n : {std::size_t(1), std::size_t(33), std::size_t(4099), big}) {
    check_bulk<C32, float, Q, D>(n);
    check_bulk<C32, rcclx::bf16, Q, D>(n);
    check_bulk<C8, float, Q, D>(n);
    check_bulk<C8, rcclx::bf16, Q, D>(n);
    check_bulk<CF, rcclx::bf16, Q, D>(n);
#if RCCLX_BACKEND_HOST
    // Several "threads" in turn: the round logic (whole rounds, the checked last round, prefetch
    // past the end) with more than one thread; on the host a thread owns whole blocks.
    check_bulk<C32, float, Q, D, 5>(n);
    check_bulk<C8, rcclx::bf16, Q, D, 3>(n);
#endif
  }
}

TEST_CASE("quantize_blocks: bad arguments are clear errors", "[fp8][block][bulk]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  device_buffer in(4096), q(4096), s(4096);
  auto* fin = in.as<float>();
  auto* pq = q.as<std::uint8_t>();
  auto* ps = s.as<float>();
  REQUIRE_NOTHROW(f8::quantize_blocks<f8::e4m3>(fin, 0, nullptr, nullptr));  // nothing to do
  try {
    f8::quantize_blocks<f8::e4m3>(fin + 1, 100, pq, ps);
    FAIL("no error for a misaligned input");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::misaligned);
    REQUIRE(std::string(e.what()).find("in must be 16-byte aligned") != std::string::npos);
  }
  REQUIRE_THROWS_AS(f8::quantize_blocks<f8::e4m3>(fin, 100, pq + 4, ps), rcclx::error);
  REQUIRE_THROWS_AS(f8::dequantize_blocks<f8::e4m3>(pq, ps, 100, fin + 2), rcclx::error);
  try {
    f8::dequantize_blocks<f8::e4m3>(pq, static_cast<const float*>(nullptr), 100, fin);
    FAIL("no error for null scales");
  } catch (const rcclx::error& e) {
    REQUIRE(e.code() == rcclx::errc::invalid_argument);
    REQUIRE(std::string(e.what()).find("scales is null") != std::string::npos);
  }
}

// ---- the multi-lane fragment form (GPU only: on the host a thread owns its whole block) --------
#if RCCLX_BACKEND_GPU
namespace {
template <class F, int N, class T>
struct fragment_kernel {
  const T* in;
  std::uint8_t* q;
  float* s;
  std::size_t blocks;
  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rcclx::testing::launch_index ix) const {
    const std::size_t t = static_cast<std::size_t>(ix.block) * g.size() + g.thread_rank();
    const std::size_t total = static_cast<std::size_t>(ix.num_blocks) * g.size();
    constexpr int lanes = 32 / N;
    for (std::size_t base = 0; base < blocks * lanes; base += total) {  // uniform trip count
      const std::size_t f = base + t;
      T x[N];
      for (int i = 0; i < N; ++i) x[i] = f < blocks * lanes ? in[f * N + i] : T{};
      f8::packed<N> p;
      const float sc = f8::block_quantize<F>{}(x, p);
      if (f < blocks * lanes) {
        p.store(q + f * N);
        if (f % lanes == 0) s[f / lanes] = sc;
      }
    }
  }
};

template <class F, int N, class T>
void check_fragments() {
  const std::size_t blocks = 5000;
  const auto in = bulk_input<T>(blocks * 32, 99);
  device_buffer d_in(in.size() * sizeof(T)), d_q(in.size()), d_s(blocks * 4);
  rcclx::gpu::copy(d_in.p, in.data(), in.size() * sizeof(T));
  rcclx::testing::launch_emulated(1, 8, 128,
                                  fragment_kernel<F, N, T>{d_in.as<T>(), d_q.as<std::uint8_t>(), d_s.as<float>(), blocks});
  rcclx::gpu::device_synchronize();
  std::vector<std::uint8_t> q(in.size());
  std::vector<float> s(blocks);
  rcclx::gpu::copy(q.data(), d_q.p, q.size());
  rcclx::gpu::copy(s.data(), d_s.p, blocks * 4);
  std::uint64_t bad = 0;
  for (std::size_t b = 0; b < blocks; ++b) {
    std::uint8_t want[32];
    const float ws = f8::block_quantize<F, 32, scale_kind::fp32, f8::path::software>{}(in.data() + b * 32, want);
    bad += bits(ws) != bits(s[b]);
    for (int i = 0; i < 32; ++i) bad += want[i] != q[b * 32 + i];
  }
  REQUIRE(bad == 0);
}
}  // namespace

TEST_CASE("block_quantize: lanes sharing a block (device) equal one thread per block (host)", "[fp8][block]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  check_fragments<f8::e4m3, 4, float>();           // 8 lanes per block
  check_fragments<f8::e4m3, 8, rcclx::bf16>();     // 4 lanes
  check_fragments<f8::e5m2, 16, float>();          // 2 lanes
  check_fragments<f8::e4m3_fnuz, 1, float>();      // 32 lanes
}
#else
TEST_CASE("block_quantize: lanes sharing a block (device) equal one thread per block (host)", "[fp8][block]") {
  WARN("host backend: a thread owns its whole block here; the multi-lane form is checked on GPUs");
}
#endif
