// tests/dda/reference.hpp: inputs, an independent float64 reference and tolerances for the DDA
// AllReduce tests. The reference never calls rcclx's reduction code: it widens every input with its
// own decoder (exact in double), reduces in double, and derives the tolerance from the type.
#pragma once

#include <rcclx/core/ops.hpp>
#include <rcclx/core/types.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace rcclx_test {

// Exact value of an element, decoded independently of rcclx's converters.
inline double exact(float x) { return x; }
inline double exact(std::int32_t x) { return x; }
inline double exact(rcclx::bf16 h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline double exact(rcclx::fp16 h) {
  const int s = h.bits >> 15, e = (h.bits >> 10) & 31, m = h.bits & 1023;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return s ? -v : v;
}

// Unit roundoff of the output type (half an ulp, relative) and the absolute rounding error near zero.
template <class T> struct type_info;
template <> struct type_info<float> { static constexpr double u = 0x1p-24, tiny = 0x1p-150; static constexpr const char* name = "float"; };
template <> struct type_info<rcclx::bf16> { static constexpr double u = 0x1p-8, tiny = 0x1p-134; static constexpr const char* name = "bf16"; };
template <> struct type_info<rcclx::fp16> { static constexpr double u = 0x1p-11, tiny = 0x1p-25; static constexpr const char* name = "fp16"; };
template <> struct type_info<std::int32_t> { static constexpr double u = 0, tiny = 0; static constexpr const char* name = "int32"; };

// Random inputs: floats uniform in [-1, 1) rounded to T; int32 over its whole range (sums wrap).
template <class T>
inline T random_value(std::mt19937_64& g) {
  if constexpr (std::is_same<T, std::int32_t>::value) {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(g()));
  } else {
    const double x = std::ldexp(static_cast<double>(g() >> 11), -52) - 1.0;  // [-1, 1)
    return T(static_cast<float>(x));
  }
}

template <class T>
inline void fill_random(std::vector<T>& v, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  for (auto& x : v) x = random_value<T>(g);
}

// Result of one element: the reference value and the tolerance the output must meet.
struct expected {
  double value;
  double tol;
  bool nan;
};

// Reference of element i over all ranks' inputs.
template <class T>
inline expected reference(const std::vector<std::vector<T>>& in, std::size_t i, rcclx::reduce_op op) {
  const int n = static_cast<int>(in.size());
  if constexpr (std::is_same<T, std::int32_t>::value) {
    std::int64_t acc = in[0][i];
    for (int p = 1; p < n; ++p) {
      const std::int64_t x = in[p][i];
      if (op == rcclx::reduce_op::sum) acc += x;
      else if (op == rcclx::reduce_op::min) acc = x < acc ? x : acc;
      else acc = x > acc ? x : acc;
    }
    // Sums wrap modulo 2^32.
    const auto wrapped = static_cast<std::int32_t>(static_cast<std::uint32_t>(static_cast<std::uint64_t>(acc)));
    return {static_cast<double>(wrapped), 0.0, false};
  } else {
    double acc = exact(in[0][i]), mag = std::fabs(acc);
    bool nan = std::isnan(acc);
    for (int p = 1; p < n; ++p) {
      const double x = exact(in[p][i]);
      nan = nan || std::isnan(x);
      mag += std::fabs(x);
      if (op == rcclx::reduce_op::sum) acc += x;
      else if (op == rcclx::reduce_op::min) acc = x < acc ? x : acc;
      else acc = x > acc ? x : acc;
    }
    nan = nan || std::isnan(acc);  // also inf + -inf
    if (op != rcclx::reduce_op::sum) return {acc, 0.0, nan};  // min/max: one of the inputs, exactly
    // fp32 accumulation of n terms in order: |err| <= (n-1) u32 sum|x| (first order); then one
    // rounding to T: u_T |value| (+ the subnormal spacing near zero). Doubled for safety margins
    // of the first-order bound.
    const double acc_err = 2.0 * (n - 1) * 0x1p-24 * mag;
    return {acc, type_info<T>::u * (std::fabs(acc) + acc_err) + acc_err + type_info<T>::tiny, nan};
  }
}

template <class T>
inline double as_double(T x) { return exact(x); }

// Checks every element of `out` against the reference; returns the number of mismatches and the
// first one described in `first`.
template <class T>
inline std::size_t count_mismatches(const std::vector<std::vector<T>>& in, const std::vector<T>& out,
                                    rcclx::reduce_op op, std::string& first) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const expected e = reference(in, i, op);
    const double got = as_double(out[i]);
    const bool ok = e.nan ? std::isnan(got) : (!std::isnan(got) && std::fabs(got - e.value) <= e.tol) ||
                                                  (std::isinf(e.value) && got == e.value);
    if (!ok) {
      if (bad == 0)
        first = "element " + std::to_string(i) + ": got " + std::to_string(got) + ", expected " +
                std::to_string(e.value) + " +- " + std::to_string(e.tol);
      ++bad;
    }
  }
  return bad;
}

template <class T>
inline bool bitwise_equal(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace rcclx_test
