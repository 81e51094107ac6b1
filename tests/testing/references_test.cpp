// testing/references.hpp: the top-k reference on hand-made rows (NaN first, ties by index, -0 equal
// to +0, padding) and against a full sort; the RMSNorm reference and its tolerances against the
// fused tests' own float64 model (tests/fused/reference.hpp, bf16 and FP8 outputs).
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

}  // namespace
