// tests/dda/op_reference.hpp: inputs and references for the reductions with product, avg and
// premul_sum (and sum, min, max) that the extended collectives' tests share: bit for bit against the
// documented fp32 rank-order computation (this file's own float arithmetic and its own rounding to
// bf16 / fp16: no rcclx code), and within a float64 tolerance of the exact result.
#pragma once

#include <rcclx/core/ops.hpp>
#include <rcclx/core/types.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "reference.hpp"

namespace op_ref {

using rcclx::reduce_op;
using rcclx::reduce_spec;

// Host copies of elements: std::vector<bool> packs bits, so a bool travels as a one-byte wrapper.
struct byte_bool {
  bool v;
  byte_bool() = default;
  byte_bool(bool b) : v(b) {}  // NOLINT: implicit, as a bool
  operator bool() const { return v; }
};
static_assert(sizeof(byte_bool) == 1, "byte_bool is one byte, as bool");
template <class T>
using host_elem = std::conditional_t<std::is_same<T, bool>::value, byte_bool, T>;
template <class T>
using host_vec = std::vector<host_elem<T>>;

// fp32 -> T, nearest even, by this file's own arithmetic (double is exact for every step here).
inline double round_fp16(double f) {
  if (std::isnan(f) || std::isinf(f)) return f;
  const double a = std::fabs(f);
  if (a == 0) return f;
  int e = std::ilogb(a);
  if (e < -14) e = -14;
  const double ulp = std::ldexp(1.0, e - 10);
  const double q = std::nearbyint(a / ulp) * ulp;  // ties to even (default rounding mode)
  const double r = q >= 65520.0 ? std::numeric_limits<double>::infinity() : q;
  return f < 0 ? -r : r;
}
inline double round_bf16(double f) {
  if (std::isnan(f) || std::isinf(f)) return f;
  const double a = std::fabs(f);
  if (a == 0) return f;
  int e = std::ilogb(a);
  if (e < -126) e = -126;
  const double ulp = std::ldexp(1.0, e - 7);
  const double q = std::nearbyint(a / ulp) * ulp;
  const double r = q >= std::ldexp(1.0, 128) ? std::numeric_limits<double>::infinity() : q;
  return f < 0 ? -r : r;
}
template <class T>
double round_to(float f) {
  if constexpr (std::is_same<T, rcclx::bf16>::value) return round_bf16(f);
  else if constexpr (std::is_same<T, rcclx::fp16>::value) return round_fp16(f);
  else return f;
}

// Inputs: product: magnitudes in [0.75, 1.5) with random signs (products stay normal); the others
// uniform in [-1, 1); all exact in T. Integers: their whole range (sums and products wrap); bool:
// mostly true for and (min, product), mostly false for or (sum, max), so both results occur.
template <class T>
host_vec<T> make_input(std::size_t count, std::uint64_t seed, reduce_op op) {
  std::mt19937_64 g(seed);
  host_vec<T> v(count);
  for (auto& x : v) {
    if constexpr (std::is_same<T, bool>::value) {
      const bool b = (g() % 4) != 0;
      x = (op == reduce_op::max || op == reduce_op::sum) ? !b : b;
    } else if constexpr (std::is_integral<T>::value) {
      x = static_cast<T>(g());
    } else {
      double d = std::ldexp(static_cast<double>(g() >> 11), -53);  // [0, 1)
      d = op == reduce_op::product ? (0.75 + 0.75 * d) * ((g() & 1) ? -1 : 1) : 2 * d - 1;
      if constexpr (std::is_same<T, double>::value) x = d;
      else x = T(static_cast<float>(d));
      // T(float) rounds; exact() decodes what was stored, independent of rcclx.
    }
  }
  return v;
}

inline std::string num(double x) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.9g", x);
  return buf;
}

// Element i of the result against the references (T explicit: check_element<T>).
template <class T>
std::string check_element(const std::vector<host_vec<T>>& in, std::size_t i, const reduce_spec& spec,
                          host_elem<T> got) {
  const int n = static_cast<int>(in.size());
  using rcclx_test::exact;
  if constexpr (std::is_same<T, bool>::value) {
    const bool all = spec.op == reduce_op::min || spec.op == reduce_op::product;  // and; sum, max: or
    bool acc = in[0][i];
    for (int p = 1; p < n; ++p) acc = all ? (acc && bool(in[p][i])) : (acc || bool(in[p][i]));
    if (bool(got) != acc)
      return "element " + std::to_string(i) + ": got " + std::to_string(bool(got)) + ", expected " + std::to_string(acc);
    return {};
  } else if constexpr (std::is_integral<T>::value) {
    // Sums and products modulo 2^64, then narrowed to T (modulo its width); min / max exact.
    std::uint64_t acc = static_cast<std::uint64_t>(static_cast<std::int64_t>(in[0][i]));
    for (int p = 1; p < n; ++p) {
      const T cur = static_cast<T>(acc);
      const std::uint64_t x = static_cast<std::uint64_t>(static_cast<std::int64_t>(in[p][i]));
      if (spec.op == reduce_op::product) acc *= x;
      else if (spec.op == reduce_op::min) acc = in[p][i] < cur ? x : acc;
      else if (spec.op == reduce_op::max) acc = in[p][i] > cur ? x : acc;
      else acc += x;
    }
    T want = static_cast<T>(acc);
    if (spec.op == reduce_op::avg) want = static_cast<T>(want / n);  // the wrapped sum, truncated toward zero
    if (got != want)
      return "element " + std::to_string(i) + ": got " + std::to_string(static_cast<long long>(got)) + ", expected " +
             std::to_string(static_cast<long long>(want));
    return {};
  } else if constexpr (std::is_same<T, double>::value) {
    // Rank order in double, each product rounded before the sum (volatile: never fused).
    double acc = 0;
    for (int p = 0; p < n; ++p) {
      volatile double y = in[p][i];
      if (spec.op == reduce_op::premul_sum) y = y * spec.factor;
      if (p == 0) acc = y;
      else if (spec.op == reduce_op::product) acc = acc * y;
      else if (spec.op == reduce_op::min) acc = y < acc ? static_cast<double>(y) : acc;
      else if (spec.op == reduce_op::max) acc = y > acc ? static_cast<double>(y) : acc;
      else acc = acc + y;
    }
    if (spec.op == reduce_op::avg) acc = acc / n;
    if (std::memcmp(&acc, &got, sizeof(double)) != 0)
      return "element " + std::to_string(i) + ": got " + num(got) + ", expected " + num(acc) + " (float64 rank order)";
    return {};
  } else {
    float acc = 0;
    double exact_acc = 0, mag = 0;
    for (int p = 0; p < n; ++p) {
      const float x = static_cast<float>(exact(in[p][i]));
      float y = x;
      double yd = exact(in[p][i]);
      if (spec.op == reduce_op::premul_sum) {
        const float f = static_cast<float>(spec.factor);
        volatile float prod = x * f;  // rounded to fp32 on its own
        y = prod;
        yd *= static_cast<double>(f);
      }
      if (p == 0) {
        acc = y;
        exact_acc = yd;
      } else if (spec.op == reduce_op::product) {
        acc = acc * y;
        exact_acc *= yd;
      } else if (spec.op == reduce_op::min || spec.op == reduce_op::max) {
        const bool take = spec.op == reduce_op::min ? y < acc : y > acc;
        if (take) acc = y, exact_acc = yd;
      } else {
        volatile float s = acc + y;
        acc = s;
        exact_acc += yd;
      }
      mag += std::fabs(yd);
    }
    if (spec.op == reduce_op::avg) {
      acc = acc / static_cast<float>(n);
      exact_acc /= n;
      mag /= n;
    }
    const double want = round_to<T>(acc), g = exact(got);
    if (!(g == want) && !(std::isnan(g) && std::isnan(want)))
      return "element " + std::to_string(i) + ": got " + num(g) + ", expected " + num(want) + " (fp32 rank order)";
    // float64: n fp32 roundings (products: relative; sums: of the magnitudes), one rounding to T.
    const double u = rcclx_test::type_info<T>::u;
    const double fp32_err = spec.op == reduce_op::product ? 2.0 * n * 0x1p-24 * std::fabs(exact_acc)
                                                          : 2.0 * (n + 1) * 0x1p-24 * mag;
    const double tol = u * (std::fabs(exact_acc) + fp32_err) + fp32_err + rcclx_test::type_info<T>::tiny;
    if (std::fabs(g - exact_acc) > tol)
      return "element " + std::to_string(i) + ": got " + num(g) + ", float64 " + num(exact_acc) + " +- " + num(tol);
    return {};
  }
}

}  // namespace op_ref
