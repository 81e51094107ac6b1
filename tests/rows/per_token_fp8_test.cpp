// fused::fp8_out_per_token (per-token dynamic FP8): codes and per-row scales bit-equal to a host
// implementation written from the formula (amax, m = qmax / max(amax, 1e-12f), codes = the scalar
// FP8 oracle of tests/fp8 on y * m, scale = 1 / m) on rows whose AllReduce sums are exact, through
// a tile AllReduce on emulated ranks (ragged rows: any length; flat and tree); and the decoded
// values against a float64 reference on random rows.
#include <rcclx/fused/fp8_per_token.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/gpu/shared.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../fused/reference.hpp"
#include "../support/catch.hpp"

namespace rows_fp8 {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::algorithm;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;
constexpr int threads = on_host ? 1 : 256;
constexpr std::size_t max_cols = 1024;

// Rank r's share of y: y / 2, y / 4, ..., and the last two ranks y / 2^(n-1) each (exact sums).
RCCLX_HOST_DEVICE inline float share(int r, int n, float y) {
  const int k = r < n - 1 ? r + 1 : n - 1;
  return y * (1.0f / static_cast<float>(1u << k));
}
// Rank r's value of a random input (uniform in [-1, 1)).
RCCLX_HOST_DEVICE inline float random_value(int r, std::size_t row, std::size_t col) {
  std::uint64_t h = (static_cast<std::uint64_t>(row) << 32) ^ (static_cast<std::uint64_t>(col) << 8) ^ static_cast<std::uint64_t>(r);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

template <class T, class F, algorithm Algo>
struct per_token_kernel {
  static constexpr int max_threads_per_block = threads;
  const rcclx::core::peer_table<T, max_r>* tables;
  std::uint8_t* codes[max_r];
  float* scales[max_r];
  const float* y;  // [rows][cols]: the sums (exact split); nullptr: random inputs
  fz::tile_slots slots;
  std::size_t rows, cols, ld;
  float qmax;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    using stage = fz::fp8_out_per_token<F, threads>;
    auto& tmp = rcclx::gpu::block_shared<typename stage::storage_type, struct per_token_tag>();
    const fz::ragged_row_tiles map{rows, cols};
    const std::size_t tile = fz::padded_cols<T>(cols);
    fz::tile_allreduce<T, max_r, Algo> ar(tables[ix.rank], slots, tile, static_cast<int>(rows));
    const fz::epilogue<stage> epi{{codes[ix.rank], ld, scales[ix.rank], qmax, &tmp}};
    constexpr int vpt = on_host ? static_cast<int>(max_cols / rcclx::gpu::elems_per_vec16<T>) : 1;
    for (int t = ix.block; t < static_cast<int>(rows); t += ix.num_blocks) {
      T* in = ar.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < tile; e += static_cast<std::size_t>(g.size())) {
        float x = 1e30f * static_cast<float>(ix.rank + 1);  // padding lanes: never passed to the stage
        if (e < cols) x = y ? share(ix.rank, ix.num_ranks, y[t * cols + e]) : random_value(ix.rank, t, e);
        in[e] = T(x);
      }
      ar.publish(g, t);
    }
    bool ok = true;
    for (int t = ix.block; t < static_cast<int>(rows) && ok; t += ix.num_blocks) ok = ar.template reduce<vpt>(g, t, map, epi);
    ar.finish(g, ix.num_blocks);
  }
};

}  // namespace rows_fp8

namespace {

using namespace rows_fp8;

std::uint32_t bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// The formula, on the host, with the tests/fp8 oracle for the codes.
template <class F>
void reference_row(const float* y, std::size_t cols, float qmax, std::uint8_t* codes, float& scale) {
  float amax = 0.0f;
  for (std::size_t j = 0; j < cols; ++j)
    if (!std::isnan(y[j]) && std::fabs(y[j]) > amax) amax = std::fabs(y[j]);
  const float m = qmax / (amax > 1e-12f ? amax : 1e-12f);
  for (std::size_t j = 0; j < cols; ++j) codes[j] = fp8_ref::table_of<F>().encode(y[j] * m, fp8_ref::mode::saturate);
  scale = 1.0f / m;
}

// Rows of sums that are exact in T and under the split: small integers times a power of two per
// row; a zero row; one huge value; ties (midpoints of adjacent codes with m = 1 and m = 2).
template <class F>
std::vector<float> exact_rows(std::size_t rows, std::size_t cols, float qmax, std::uint32_t seed) {
  std::vector<float> y(rows * cols);
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> k(-127, 127), ex(-40, 20);
  const auto& tab = fp8_ref::table_of<F>();
  std::vector<float> mids;  // every midpoint of adjacent non-negative codes, both signs
  for (int c = 0; c + 1 <= tab.max_code; ++c) {
    const float mid = static_cast<float>((tab.values[c] + tab.values[c + 1]) / 2);
    mids.push_back(mid);
    mids.push_back(-mid);
  }
  for (std::size_t i = 0; i < rows; ++i) {
    float* r = &y[i * cols];
    const int kind = static_cast<int>(i % 6);
    const int e = ex(gen);
    for (std::size_t j = 0; j < cols; ++j) r[j] = std::ldexp(static_cast<float>(k(gen)), e);
    if (kind == 1) std::fill(r, r + cols, 0.0f);
    if (kind == 2) r[(i * 7) % cols] = std::ldexp(1.0f, 100);  // the rest underflows to 0 and subnormals
    if (kind == 3 || kind == 4) {
      const float f = kind == 3 ? 1.0f : 0.5f;  // m = 1, then m = 2
      for (std::size_t j = 0; j < cols; ++j) r[j] = mids[(j + i) % mids.size()] * f;
      r[cols / 2] = qmax * f;
      if (cols > 1) r[0] = -qmax * f;  // the scale from column 0 also when it holds the max
    }
  }
  return y;
}

template <class T>
struct pt_world {
  int n;
  std::size_t rows, ld;
  fz::tile_slots slots;
  rt::emulated_world<max_r> world;
  std::vector<void*> owned;
  std::vector<std::uint8_t*> codes;
  std::vector<float*> scales;

  pt_world(int num_ranks, std::size_t r, std::size_t l)
      : n(num_ranks), rows(r), ld(l), slots{0, static_cast<int>(r)},
        world(num_ranks, fz::tile_allreduce<T, max_r, algorithm::tree>::workspace_bytes(max_cols, static_cast<int>(r)), slots.end()) {
    for (int q = 0; q < n; ++q) {
      codes.push_back(static_cast<std::uint8_t*>(alloc(rows * ld)));
      scales.push_back(static_cast<float*>(alloc((rows + 2) * 4)));
    }
  }
  ~pt_world() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  void* alloc(std::size_t bytes) {
    owned.push_back(rcclx::gpu::device_malloc(bytes));
    return owned.back();
  }
};

constexpr std::uint8_t code_sentinel = 0xA5;
constexpr float scale_sentinel = -7.75f;

struct pt_out {
  std::vector<std::vector<std::uint8_t>> codes;
  std::vector<std::vector<float>> scales;
};

template <class T, class F, algorithm Algo>
pt_out run_per_token(pt_world<T>& w, std::size_t cols, const float* y_dev, float qmax) {
  per_token_kernel<T, F, Algo> k{};
  k.tables = w.world.template device_tables<T>();
  std::vector<std::uint8_t> c0(w.rows * w.ld, code_sentinel);
  std::vector<float> s0(w.rows + 2, scale_sentinel);
  for (int r = 0; r < w.n; ++r) {
    rcclx::gpu::copy(w.codes[r], c0.data(), c0.size());
    rcclx::gpu::copy(w.scales[r], s0.data(), s0.size() * 4);
    k.codes[r] = w.codes[r];
    k.scales[r] = w.scales[r];
  }
  k.y = y_dev;
  k.slots = w.slots;
  k.rows = w.rows;
  k.cols = cols;
  k.ld = w.ld;
  k.qmax = qmax;
  rt::launch_emulated(w.n, 3, threads, k);
  rcclx::gpu::device_synchronize();
  w.world.throw_if_error();
  pt_out o;
  for (int r = 0; r < w.n; ++r) {
    o.codes.emplace_back(c0.size());
    o.scales.emplace_back(s0.size());
    rcclx::gpu::copy(o.codes.back().data(), w.codes[r], c0.size());
    rcclx::gpu::copy(o.scales.back().data(), w.scales[r], s0.size() * 4);
  }
  return o;
}

template <class T, class F>
void exact_case(int n, std::size_t cols, std::size_t ld, float qmax) {
  const std::size_t rows = 12;
  CAPTURE(fp8_ref::params_of<F>().name, n, cols, ld, qmax, sizeof(T));
  const std::vector<float> y = exact_rows<F>(rows, cols, qmax, static_cast<std::uint32_t>(cols * 31 + n));
  std::vector<std::uint8_t> want(rows * cols);
  std::vector<float> want_s(rows);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) REQUIRE(static_cast<float>(T(y[i * cols + j])) == y[i * cols + j]);
    reference_row<F>(&y[i * cols], cols, qmax, &want[i * cols], want_s[i]);
  }
  pt_world<T> w(n, rows, ld);
  auto* y_dev = static_cast<float*>(w.alloc(y.size() * 4));
  rcclx::gpu::copy(y_dev, y.data(), y.size() * 4);
  for (const bool tree : {false, true}) {
    CAPTURE(tree);
    const pt_out o = tree ? run_per_token<T, F, algorithm::tree>(w, cols, y_dev, qmax)
                          : run_per_token<T, F, algorithm::flat>(w, cols, y_dev, qmax);
    for (int r = 0; r < n; ++r) {
      CAPTURE(r);
      for (std::size_t i = 0; i < rows; ++i) {
        CAPTURE(i);
        REQUIRE(bits(o.scales[r][i]) == bits(want_s[i]));
        for (std::size_t j = 0; j < ld; ++j) {
          CAPTURE(j, y[i * cols + (j < cols ? j : 0)]);
          REQUIRE(o.codes[r][i * ld + j] == (j < cols ? want[i * cols + j] : code_sentinel));
        }
      }
      REQUIRE(o.scales[r][rows] == scale_sentinel);
      REQUIRE(o.scales[r][rows + 1] == scale_sentinel);
    }
  }
}

// The formula's own cases on the stage alone: E-wide and element calls give the same, NaN is
// ignored by the maximum (its code is the format's NaN), the zero row.
template <class F>
void stage_alone() {
  using stage = fz::fp8_out_per_token<F, 1>;
  const float qmax = rcclx::fp8::format_traits<F>::max_finite;
  std::vector<std::uint8_t> out(32, 0);
  float scales[2] = {0, 0};
  float& scale = scales[0];
  const stage s{out.data(), 16, scales, qmax, nullptr};
  float v[8] = {1.5f, -3.0f, std::numeric_limits<float>::quiet_NaN(), 0.25f, 0.0f, -0.0f, 2.0f, 0.125f};
  float amax = s.row_identity();
  amax = s.row_accumulate(amax, s.row_partial(fz::position{0, 0}, v));
  REQUIRE(amax == 3.0f);
  s(fz::position{0, 0}, v, amax);
  std::vector<float> row(v, v + 8);
  std::uint8_t want[8];
  float want_s;
  reference_row<F>(row.data(), 8, qmax, want, want_s);
  REQUIRE(bits(scale) == bits(want_s));
  for (int j = 0; j < 8; ++j) REQUIRE(out[j] == want[j]);
  REQUIRE(out[2] == fp8_ref::table_of<F>().encode(std::numeric_limits<float>::quiet_NaN(), fp8_ref::mode::saturate));
  // Element by element: the same codes.
  for (int j = 0; j < 8; ++j) {
    float one[1] = {v[j]};
    s(fz::position{1, static_cast<std::size_t>(j)}, one, amax);
  }
  for (int j = 0; j < 8; ++j) REQUIRE(out[16 + j] == want[j]);
  REQUIRE(bits(scales[1]) == bits(want_s));
  // Zero row: m = qmax / 1e-12f, codes 0 (FNUZ has no -0: both zeros give 0).
  float z[4] = {0.0f, 0.0f, -0.0f, 0.0f};
  std::fill(out.begin(), out.end(), 0xFF);
  s(fz::position{0, 0}, z, 0.0f);
  REQUIRE(bits(scale) == bits(1.0f / (qmax / 1e-12f)));
  for (int j = 0; j < 4; ++j) REQUIRE(out[j] == fp8_ref::table_of<F>().encode(z[j] * (qmax / 1e-12f), fp8_ref::mode::saturate));
}

}  // namespace

TEST_CASE("per-token FP8: the stage alone (NaN, zero row, element calls)", "[rows][fp8]") {
  stage_alone<rcclx::fp8::e4m3>();
  stage_alone<rcclx::fp8::e5m2>();
  stage_alone<rcclx::fp8::e4m3_fnuz>();
  stage_alone<rcclx::fp8::e5m2_fnuz>();
}

TEST_CASE("per-token FP8: exact rows through a tile AllReduce, bit-equal to the formula", "[rows][fp8]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using rcclx::bf16;
  namespace f8 = rcclx::fp8;
  for (const std::size_t cols : {std::size_t(1), std::size_t(7), std::size_t(64), std::size_t(1000)}) {
    const std::size_t ld = cols + 5;
    exact_case<float, f8::e4m3>(3, cols, ld, 448.0f);
    exact_case<bf16, f8::e4m3>(2, cols, cols, 448.0f);
    exact_case<float, f8::e5m2>(2, cols, ld, 57344.0f);
    exact_case<bf16, f8::e5m2_fnuz>(8, cols, ld, 57344.0f);
    exact_case<float, f8::e4m3_fnuz>(3, cols, cols, 240.0f);
    exact_case<bf16, f8::e4m3_fnuz>(2, cols, ld, 224.0f);  // vLLM's FNUZ qmax
  }
}

TEST_CASE("per-token FP8: random rows through a tile AllReduce against float64", "[rows][fp8]") {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = rcclx::bf16;
  using F = rcclx::fp8::e4m3;
  const int n = 5;
  const std::size_t rows = 9, cols = 999, ld = 1001;
  const float qmax = 448.0f;
  pt_world<T> w(n, rows, ld);
  const pt_out o = run_per_token<T, F, algorithm::flat>(w, cols, nullptr, qmax);
  const pt_out t = run_per_token<T, F, algorithm::tree>(w, cols, nullptr, qmax);
  const double u = fused_ref::unit<T>(), u32 = fused_ref::u32, u8 = fused_ref::fp8_info<F>::u();
  const double half_step = fused_ref::fp8_info<F>::half_step();
  for (int r = 0; r < n; ++r) {
    REQUIRE(o.codes[r] == o.codes[0]);
    REQUIRE(o.codes[r] == t.codes[0]);
    REQUIRE(o.scales[r] == t.scales[0]);
  }
  for (std::size_t i = 0; i < rows; ++i) {
    std::vector<double> y(cols), ey(cols);
    double amax = 0, e_amax = 0;
    for (std::size_t j = 0; j < cols; ++j) {
      double sabs = 0;
      for (int r = 0; r < n; ++r) {
        const double x = fused_ref::exact(T(random_value(r, i, j)));
        y[j] += x;
        sabs += std::fabs(x);
      }
      ey[j] = (n - 1) * u32 * sabs + u * std::fabs(y[j]) + fused_ref::tiny<T>();
      if (std::fabs(y[j]) > amax) amax = std::fabs(y[j]);
      e_amax = std::max(e_amax, ey[j]);
    }
    const double s = o.scales[0][i];
    CAPTURE(i, s, amax);
    REQUIRE(std::fabs(s - amax / qmax) <= s * (e_amax / amax + 2 * u32));
    for (std::size_t j = 0; j < cols; ++j) {
      const double got = fp8_ref::decode(fp8_ref::params_of<F>(), o.codes[0][i * ld + j]) * s;
      const double tol = 2 * (ey[j] + u8 * (std::fabs(y[j]) + ey[j]) + s * half_step + u32 * std::fabs(y[j]));
      CAPTURE(j, y[j], got, tol);
      REQUIRE(std::fabs(got - y[j]) <= tol);
    }
  }
}
