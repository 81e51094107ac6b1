// testing/references.hpp: the top-k reference on hand-made rows (NaN first, ties by index, -0 equal
// to +0, padding) and against a full sort; the RMSNorm reference and its tolerances against the
// fused tests' own float64 model (tests/fused/reference.hpp, bf16 and FP8 outputs); the lse_merge
// reference on hand-made merges and against fused::lse_merge's own FP32 merge of random records.
#include <rcclx/fused/combine_ops.hpp>
#include <rcclx/testing/references.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "../fused/reference.hpp"
#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

TEST_CASE("topk_reference: the combine's order, padded", "[testing][references]") {
  const std::vector<float> x{1.0f, nan_f, 3.0f, 3.0f, -0.0f, 0.0f};
  const auto four = rt::topk_reference(x.data(), x.size(), 10, 4);
  REQUIRE(four.size() == 4);
  CHECK(rt::same_entry(nan_f, 11, four[0]));
  CHECK(rt::same_entry(3.0f, 12, four[1]));
  CHECK(rt::same_entry(3.0f, 13, four[2]));
  CHECK(rt::same_entry(1.0f, 10, four[3]));
  const auto eight = rt::topk_reference(x.data(), x.size(), 10, 8);
  CHECK(rt::same_entry(-0.0f, 14, eight[4]));
  CHECK(rt::same_entry(0.0f, 15, eight[5]));
  CHECK_FALSE(rt::same_entry(0.0f, 14, eight[4]));  // -0 and +0: other bits
  CHECK(rt::same_entry(-inf_f, 0xFFFFFFFFu, eight[6]));
  CHECK(rt::same_entry(-inf_f, 0xFFFFFFFFu, eight[7]));
  std::mt19937 g(3);
  std::vector<float> y(1000);
  for (auto& v : y) v = static_cast<float>(static_cast<int>(g() % 64)) * 0.5f;  // many ties
  std::vector<rt::ranked_entry> all;
  for (std::size_t j = 0; j < y.size(); ++j) all.push_back({y[j], static_cast<std::uint32_t>(j)});
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.value > b.value; });
  const auto best = rt::topk_reference(y.data(), y.size(), 0, 50);
  for (int i = 0; i < 50; ++i) CHECK(rt::same_entry(all[i].value, all[i].index, best[i]));
}

template <class Out>
void same_as_the_fused_model(double scale) {
  const int n = 4;
  const std::size_t tokens = 3, hidden = 96;
  std::mt19937 g(7);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  using T = rcclx::bf16;
  std::vector<std::vector<T>> x(n, std::vector<T>(tokens * hidden));
  std::vector<T> res(tokens * hidden), w(hidden);
  for (auto& v : x)
    for (auto& e : v) e = T(d(g));
  for (auto& e : res) e = T(d(g));
  for (auto& e : w) e = T(1.0f + 0.25f * d(g));
  using F = std::conditional_t<std::is_same<Out, T>::value, void, Out>;
  const auto model = fused_ref::rmsnorm_reference<T, F>(x, res, w, tokens, hidden, 1e-6, std::is_void<F>::value ? 0.0 : scale);
  for (std::size_t i = 0; i < tokens; ++i) {
    const auto row = rt::rmsnorm_reference<T>(
        n, hidden, [&](int q, std::size_t j) { return static_cast<double>(static_cast<float>(x[q][i * hidden + j])); },
        [&](std::size_t j) { return static_cast<double>(static_cast<float>(res[i * hidden + j])); },
        [&](std::size_t j) { return static_cast<double>(static_cast<float>(w[j])); }, 1e-6);
    for (std::size_t j = 0; j < hidden; ++j) {
      const std::size_t k = i * hidden + j;
      CHECK(row.y[j] == Approx(model.out[k]).epsilon(1e-12));
      // The model adds the types' tiny terms: the tolerances agree to far below them.
      const double tol = rt::rmsnorm_tolerance<Out>(row.y[j], row.err[j], scale);
      CHECK(tol <= model.out_tol[k] * (1 + 1e-12));
      CHECK(tol >= model.out_tol[k] * (1 - 1e-6));
    }
  }
}

TEST_CASE("rmsnorm_reference and rmsnorm_tolerance: the fused tests' model", "[testing][references]") {
  same_as_the_fused_model<rcclx::bf16>(1.0);
  same_as_the_fused_model<rcclx::fp8::e4m3>(0.03);
}

TEST_CASE("lse_merge_reference: hand-made merges", "[testing][references]") {
  using T = rcclx::bf16;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Equal L: the mean of the O's, L + log 2.
  const auto two = rt::lse_merge_reference<T>(2, 2, [](int) { return 0.5f; }, [](int q, int d) { return q == 0 ? 1.0 : (d ? -1.0 : 3.0); });
  CHECK(two.lse == Approx(0.5 + std::log(2.0)).epsilon(1e-15));
  CHECK(two.o[0] == Approx(2.0).epsilon(1e-15));
  CHECK(two.o[1] == Approx(0.0).margin(1e-15));
  // A rank without keys (L = -inf, O NaN) adds nothing.
  const auto one = rt::lse_merge_reference<T>(2, 1, [](int q) { return q ? -inf_f : 2.0f; }, [&](int q, int) { return q ? nan : 0.25; });
  CHECK(one.lse == 2.0);
  CHECK(one.o[0] == 0.25);
  CHECK(one.tol[0] > 0);
  // No rank with keys: L = -inf, O = 0 exactly.
  const auto none = rt::lse_merge_reference<T>(3, 2, [](int) { return -inf_f; }, [&](int, int) { return nan; });
  CHECK(none.lse == -inf_f);
  CHECK(none.o == std::vector<double>{0.0, 0.0});
}

TEST_CASE("lse_merge_reference: fused::lse_merge's FP32 merge within the tolerances, which are tight", "[testing][references]") {
  using T = rcclx::bf16;
  using merge = rcclx::fused::lse_merge<T, 16>;
  std::mt19937 g(11);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  for (const int n : {2, 5, 8}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<merge::record> rec(n);
      for (auto& r : rec) {
        const bool empty = g() % 4 == 0;
        r.lse = empty ? -inf_f : 6.0f * d(g);
        for (auto& o : r.o) o = empty ? T::from_bits(0x7FC0) : T(d(g));
      }
      const merge op{};
      auto acc = op.init(rec[0]);
      for (int q = 1; q < n; ++q) op.fold(acc, rec[q]);
      const merge::record got = op.finalize(acc);
      const auto ref = rt::lse_merge_reference<T>(
          n, merge::head_dim, [&](int q) { return rec[q].lse; },
          [&](int q, int j) { return static_cast<double>(static_cast<float>(rec[q].o[j])); });
      CAPTURE(n, trial);
      if (ref.lse == -inf_f) {
        CHECK(got.lse == -inf_f);
        for (const T& o : got.o) CHECK(o.bits == 0);
        continue;
      }
      CHECK(std::fabs(got.lse - ref.lse) <= ref.lse_tol);
      for (int j = 0; j < merge::head_dim; ++j) {
        CHECK(std::fabs(static_cast<float>(got.o[j]) - ref.o[j]) <= ref.tol[j]);
        CHECK(ref.tol[j] <= 4 * 0x1p-8 * (std::fabs(ref.o[j]) + 0.25));  // a bound, not a blanket
      }
    }
  }
}

}  // namespace
