// tests/fused/reference.hpp: float64 references and error bounds for the fused kernels. Nothing here
// calls rcclx's arithmetic: inputs are decoded by the DDA tests' independent decoder, FP8 codes by
// the FP8 tests' textbook decoder, and every quantity is computed in double.
//
// Error bounds (first order, doubled), per element, u = unit roundoff of T (2^-8 bf16, 2^-24
// float), u32 = 2^-24, N ranks, H = hidden, docs/fusion.md "Numerics" states the same:
//   AllReduce s = sum_r x_r:   e_s = (N-1) u32 sum_r |x_r| + u |s| + tiny_T
//   new residual r = s + old:  e_r = e_s + (u + u32)(|r| + e_s) + tiny_T
//   row mean of squares ms:    dms = sum_j (2 |r_j| e_r_j + e_r_j^2) / H + (H + 16) u32 sum_j (|r_j| + e_r_j)^2 / H
//   factor f = 1/sqrt(ms+eps): ef = dms / (2 (ms + eps)) + 3 u32          (relative)
//   y = r f w:                 e_y = |w| f e_r + |y| (ef + 2 u32)
//   output T:                  tol = 2 (e_y + u (|y| + e_y)) + tiny_T
//   output FP8, scale s:       tol = 2 (e_y + u8 (|y| + e_y) + s * subnormal_step / 2 + u32 |y|), u8 = 2^-(M+1)
//   residual:                  tol = 2 e_r
#pragma once

#include <rcclx/fp8/format.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "../dda/reference.hpp"
#include "../fp8/reference.hpp"

namespace fused_ref {

using rcclx_test::exact;

constexpr double u32 = 0x1p-24;

template <class T>
constexpr double unit() {
  return rcclx_test::type_info<T>::u;
}
template <class T>
constexpr double tiny() {
  return rcclx_test::type_info<T>::tiny;
}

// FP8 format parameters for the bounds: unit roundoff, half the subnormal step, largest value.
template <class F>
struct fp8_info {
  static double u() { return std::ldexp(1.0, -(fp8_ref::params_of<F>().mantissa_bits + 1)); }
  static double half_step() {
    return std::ldexp(1.0, 1 - fp8_ref::params_of<F>().bias - fp8_ref::params_of<F>().mantissa_bits - 1);
  }
  static double max() { return rcclx::fp8::format_traits<F>::max_finite; }
};

struct rms_expected {
  std::vector<double> out, out_tol, res, res_tol;
};

// Reference of the fused AllReduce + residual + RMSNorm: x[r] is rank r's input (tokens x hidden),
// `residual` the residual before the call, `weight` the RMSNorm weight. Out: T (fp8_scale = 0) or
// FP8 of format F (fp8_scale > 0: out holds the clamped value the dequantized code approximates).
template <class T, class F = void>
rms_expected rmsnorm_reference(const std::vector<std::vector<T>>& x, const std::vector<T>& residual,
                               const std::vector<T>& weight, std::size_t tokens, std::size_t hidden, double eps,
                               double fp8_scale = 0.0) {
  const int n = static_cast<int>(x.size());
  const double u = unit<T>(), tn = tiny<T>();
  rms_expected e;
  const std::size_t count = tokens * hidden;
  e.out.resize(count);
  e.out_tol.resize(count);
  e.res.resize(count);
  e.res_tol.resize(count);
  std::vector<double> er(hidden);
  for (std::size_t i = 0; i < tokens; ++i) {
    double ss = 0, dss = 0, mag2 = 0;
    for (std::size_t j = 0; j < hidden; ++j) {
      const std::size_t k = i * hidden + j;
      double s = 0, sabs = 0;
      for (int r = 0; r < n; ++r) {
        const double v = exact(x[r][k]);
        s += v;
        sabs += std::fabs(v);
      }
      const double es = (n - 1) * u32 * sabs + u * std::fabs(s) + tn;
      const double rr = s + exact(residual[k]);
      const double e_r = es + (u + u32) * (std::fabs(rr) + es) + tn;
      e.res[k] = rr;
      e.res_tol[k] = 2 * e_r;
      er[j] = e_r;
      ss += rr * rr;
      dss += 2 * std::fabs(rr) * e_r + e_r * e_r;
      mag2 += (std::fabs(rr) + e_r) * (std::fabs(rr) + e_r);
    }
    const double h = static_cast<double>(hidden);
    const double ms = ss / h;
    const double dms = dss / h + (h + 16) * u32 * mag2 / h;
    const double f = 1.0 / std::sqrt(ms + eps);
    const double ef = dms / (2 * (ms + eps)) + 3 * u32;
    for (std::size_t j = 0; j < hidden; ++j) {
      const std::size_t k = i * hidden + j;
      const double w = exact(weight[j]);
      const double y = e.res[k] * f * w;
      const double ey = std::fabs(w) * f * er[j] + std::fabs(y) * (ef + 2 * u32);
      if constexpr (std::is_void<F>::value) {
        e.out[k] = y;
        e.out_tol[k] = 2 * (ey + u * (std::fabs(y) + ey)) + tn;
      } else {
        const double lim = fp8_info<F>::max() * fp8_scale;
        e.out[k] = std::min(std::max(y, -lim), lim);  // saturating encode
        e.out_tol[k] = 2 * (ey + fp8_info<F>::u() * (std::fabs(y) + ey) + fp8_scale * fp8_info<F>::half_step() +
                            u32 * std::fabs(y));
      }
    }
  }
  return e;
}

// Value of an output element: T decoded exactly, or an FP8 code dequantized with the scale.
template <class T, class F>
double output_value(const void* data, std::size_t k, double fp8_scale) {
  if constexpr (std::is_void<F>::value) {
    T v;
    std::memcpy(&v, static_cast<const unsigned char*>(data) + k * sizeof(T), sizeof(T));
    return exact(v);
  } else {
    return fp8_ref::decode(fp8_ref::params_of<F>(), static_cast<const std::uint8_t*>(data)[k]) * fp8_scale;
  }
}

// Number of elements of `got` (count elements) outside [expected - tol, expected + tol]; the first
// one described in `first`.
template <class Get>
std::size_t mismatches(std::size_t count, Get&& got, const std::vector<double>& expected,
                       const std::vector<double>& tol, std::string& first, const char* what) {
  std::size_t bad = 0;
  for (std::size_t k = 0; k < count; ++k) {
    const double g = got(k);
    if (!(std::fabs(g - expected[k]) <= tol[k])) {
      if (bad == 0)
        first = std::string(what) + " element " + std::to_string(k) + ": got " + std::to_string(g) + ", expected " +
                std::to_string(expected[k]) + " +- " + std::to_string(tol[k]);
      ++bad;
    }
  }
  return bad;
}

}  // namespace fused_ref
