// testing/error_bounds.hpp against the tests' own float64 models (tests/dda/reference.hpp,
// tests/lpc/reference.hpp, written from docs/numerics.md independently of the library): the
// quantization bound of one block equals the model's for every format, scale kind and magnitude
// (the scale floor included); the whole-message LPC bound is at least the model's bound of every
// element of inputs in [-1, 1]; the plain AllReduce tolerance is the model's and holds for real FP32
// rank-order sums rounded to T; error_summary and summarize_errors keep the largest error, NaN and
// the verdict whatever the number of workers.
#include <rcclx/testing/error_bounds.hpp>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "../lpc/reference.hpp"
#include "../support/catch.hpp"

namespace {

namespace rt = rcclx::testing;
namespace f8 = rcclx::fp8;
using rcclx::lpc::collective;

template <class F, f8::scale_kind S>
void same_block_error() {
  const lpc_test::quant_model m{lpc_test::info<F>(), S == f8::scale_kind::e8m0, 32};
  for (double a = 0x1p-140; a < 1e6; a *= 1.37) {
    CAPTURE(f8::format_traits<F>::name, a);
    REQUIRE(rt::fp8_block_error<F, S>(a) == m.q(a));
  }
}

TEST_CASE("fp8_block_error is the documented bound of one block, for every format and scale kind",
          "[testing][error_bounds]") {
  same_block_error<f8::e4m3, f8::scale_kind::fp32>();
  same_block_error<f8::e4m3, f8::scale_kind::e8m0>();
  same_block_error<f8::e5m2, f8::scale_kind::fp32>();
  same_block_error<f8::e4m3_fnuz, f8::scale_kind::fp32>();
  same_block_error<f8::e5m2_fnuz, f8::scale_kind::e8m0>();
  CHECK(rt::fp8_block_error<f8::e4m3>(1.0) == (1.0 / 28) * (1 + 0x1p-19));
  CHECK(rt::unit_roundoff<float>() == 0x1p-24);
  CHECK(rt::unit_roundoff<rcclx::bf16>() == 0x1p-8);
  CHECK(rt::unit_roundoff<rcclx::fp16>() == 0x1p-11);
}

template <class T>
void lpc_bound_covers_the_model(int n) {
  using cfg = rcclx::lpc::default_config;
  const lpc_test::quant_model m{lpc_test::info<cfg::format>(), cfg::scale == f8::scale_kind::e8m0, cfg::block_size};
  std::mt19937_64 g(1234 + n);
  const std::size_t count = static_cast<std::size_t>(n) * cfg::block_size * 3;
  std::vector<std::vector<T>> in(n, std::vector<T>(count));
  for (auto& x : in) {
    for (auto& e : x) e = rcclx_test::random_value<T>(g);
    for (std::size_t b = 0; b < count; b += cfg::block_size) x[b + g() % cfg::block_size] = T(g() & 1 ? 1.0f : -1.0f);
  }
  const auto worst = [](const std::vector<lpc_test::expect>& e) {
    double w = 0;
    for (const auto& x : e) w = std::max(w, x.tol);
    return w;
  };
  const double slack = 1 + 1e-12;
  CAPTURE(n);
  CHECK(worst(lpc_test::allreduce(in, m, rcclx::reduce_op::sum)) <= rt::lpc_error_bound<T>(collective::allreduce, n) * slack);
  CHECK(worst(lpc_test::allgather(in, m)) <= rt::lpc_error_bound<T>(collective::allgather, n) * slack);
  CHECK(worst(lpc_test::reduce_scatter(in, 1, m, rcclx::reduce_op::sum)) <=
        rt::lpc_error_bound<T>(collective::reduce_scatter, n) * slack);
  CHECK(worst(lpc_test::alltoall(in, 1, m)) <= rt::lpc_error_bound<T>(collective::alltoall, n) * slack);
  // Without FP8: copies exact, sums of N FP32 terms.
  CHECK(rt::lpc_error_bound<T>(collective::allgather, n, 1.0, false) == 0.0);
  CHECK(rt::lpc_error_bound<T>(collective::reduce_scatter, n, 1.0, false) ==
        rt::quantized_sum_bound<T>(n, 0.0, n, n));
  CHECK(rt::lpc_error_bound<T>(collective::allreduce, n, 1.0, false) < rt::lpc_error_bound<T>(collective::allreduce, n));
}

TEST_CASE("lpc_error_bound covers the documented bound of every element of inputs in [-1, 1]",
          "[testing][error_bounds]") {
  for (const int n : {2, 3, 8, 16}) {
    lpc_bound_covers_the_model<float>(n);
    lpc_bound_covers_the_model<rcclx::bf16>(n);
  }
}

template <class T>
void allreduce_tolerance_holds(int n) {
  std::mt19937_64 g(99 + n);
  for (int k = 0; k < 2000; ++k) {
    double exact = 0, mag = 0;
    float acc = 0;
    for (int p = 0; p < n; ++p) {
      const T x = rcclx_test::random_value<T>(g);
      const double v = static_cast<float>(x);
      exact += v;
      mag += std::fabs(v);
      acc = p == 0 ? static_cast<float>(x) : acc + static_cast<float>(x);
    }
    const double got = static_cast<float>(T(acc));
    const double tol = rt::allreduce_tolerance<T>(rcclx::reduce_op::sum, n, exact, mag);
    REQUIRE(std::fabs(got - exact) <= tol);
    // The tests' model (tests/dda/reference.hpp): the same formula, with a tiny term of its own.
    const double acc_err = 2.0 * (n - 1) * 0x1p-24 * mag;
    using ti = rcclx_test::type_info<T>;
    REQUIRE(tol <= ti::u * (std::fabs(exact) + acc_err) + acc_err + ti::tiny);
  }
  CHECK(rt::allreduce_tolerance<T>(rcclx::reduce_op::max, n, 1.0, 8.0) == 0.0);
}

TEST_CASE("allreduce_tolerance holds for FP32 rank-order sums rounded to T", "[testing][error_bounds]") {
  for (const int n : {2, 5, 8, 16}) {
    allreduce_tolerance_holds<float>(n);
    allreduce_tolerance_holds<rcclx::bf16>(n);
    allreduce_tolerance_holds<rcclx::fp16>(n);
  }
}

TEST_CASE("error_summary and summarize_errors: largest error, NaN kept, the verdict", "[testing][error_bounds]") {
  rt::error_summary s;
  s.add(1.0, 1.25, 0.5);
  s.add(2.0, 1.0, 0.5);
  CHECK(s.max_error == 1.0);
  CHECK_FALSE(s.within);
  rt::error_summary t;
  t.add(std::numeric_limits<double>::quiet_NaN(), 0.0, 1.0);
  t.add(0.5, true);
  CHECK(std::isnan(t.max_error));
  CHECK_FALSE(t.within);
  for (const unsigned workers : {1u, 3u, 16u}) {
    const auto all = rt::summarize_errors(1000, [](std::size_t i, rt::error_summary& e) {
      e.add(static_cast<double>(i), 0.0, 998.5);
    }, workers);
    CHECK(all.max_error == 999.0);
    CHECK_FALSE(all.within);
    const auto nan = rt::summarize_errors(1000, [](std::size_t i, rt::error_summary& e) {
      e.add(i == 500 ? std::numeric_limits<double>::quiet_NaN() : 1.0, 0.0, 2.0);
    }, workers);
    CHECK(std::isnan(nan.max_error));
    CHECK_FALSE(nan.within);
    const auto good = rt::summarize_errors(1000, [](std::size_t, rt::error_summary& e) { e.add(1.0, 0.75, 0.5); },
                                           workers);
    CHECK(good.max_error == 0.25);
    CHECK(good.within);
  }
}

}  // namespace
