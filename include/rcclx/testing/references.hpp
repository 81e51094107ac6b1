// rcclx/testing/references.hpp: what rcclx's fused operations must produce, computed on the host
// from their documentation and independently of their code, for tests and benchmarks of kernels
// built on them: the best entries of a whole row in the combine's order (fused::shard_scan,
// fused::argmax, fused::topk: vocabulary-parallel sampling), one row of AllReduce + residual +
// RMSNorm in float64 with the bound of docs/fusion.md "Numerics" (first order, doubled), and one
// record of fused::lse_merge (split-KV attention partials merged across ranks) in float64.
//
//   namespace rt = rcclx::testing;
//   const auto best = rt::topk_reference(logits, vocab, 0, 50);       // 50 entries, padded with (-inf, ~0u)
//   bool ok = rt::same_entry(got.value[i], got.index[i], best[i]);
//   const rt::rmsnorm_row ref = rt::rmsnorm_reference<rcclx::bf16>(n, hidden, x_of, residual_of, weight_of, 1e-6);
//   ok = std::fabs(out_j - ref.y[j]) <= rt::rmsnorm_tolerance<rcclx::bf16>(ref.y[j], ref.err[j]);
//   const rt::lse_merge_row m = rt::lse_merge_reference<rcclx::bf16>(n, 128, lse_of, o_of);   // m.lse, m.o[d], m.tol[d]
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "../fp8/format.hpp"
#include "error_bounds.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// One entry of a row: a logit and its (global) vocabulary index.
struct ranked_entry {
  float value;
  std::uint32_t index;
};

// The combine's order of entries (fused/combine_ops.hpp): NaN first, then larger values (-0 equal
// to +0), then lower indices.
inline bool ranked_before(const ranked_entry& a, const ranked_entry& b) {
  const bool na = std::isnan(a.value), nb = std::isnan(b.value);
  if (na != nb) return na;
  if (!na && a.value != b.value) return a.value > b.value;
  return a.index < b.index;
}

// Does an entry the combine reported match the reference's: the same index, and the same bits or
// both NaN?
inline bool same_entry(float value, std::uint32_t index, const ranked_entry& want) {
  return index == want.index &&
         (std::isnan(want.value) ? std::isnan(value) : std::memcmp(&value, &want.value, sizeof(float)) == 0);
}

// The k best entries of x[0, len), whose indices start at `begin`, then empty entries (-inf,
// 0xFFFFFFFF) up to k.
inline std::vector<ranked_entry> topk_reference(const float* x, std::size_t len, std::size_t begin, int k) {
  std::vector<ranked_entry> e(len);
  for (std::size_t j = 0; j < len; ++j) e[j] = {x[j], static_cast<std::uint32_t>(begin + j)};
  const std::size_t kk = std::min<std::size_t>(static_cast<std::size_t>(k), len);
  std::partial_sort(e.begin(), e.begin() + static_cast<std::ptrdiff_t>(kk), e.end(), ranked_before);
  e.resize(kk);
  e.resize(static_cast<std::size_t>(k), ranked_entry{-std::numeric_limits<float>::infinity(), 0xFFFFFFFFu});
  return e;
}

// One row of AllReduce + residual + RMSNorm: per column j, y = (sum_q x_q + residual) * f * w with
// f = 1 / sqrt(mean of squares + eps), and err = e_y, its first-order bound before the output's
// rounding (docs/fusion.md "Numerics": the FP32 sum in rank order rounded to T, the residual add
// rounded to T, the FP32 norm).
struct rmsnorm_row {
  std::vector<double> y, err;
};

// x(q, j): rank q's input, residual(j), weight(j), each as T decodes it.
template <class T, class X, class R, class W>
rmsnorm_row rmsnorm_reference(int num_ranks, std::size_t hidden, X&& x, R&& residual, W&& weight, double eps) {
  const double u = unit_roundoff<T>(), u32 = 0x1p-24, h = static_cast<double>(hidden);
  std::vector<double> rr(hidden), er(hidden);
  double ss = 0, dss = 0, mag2 = 0;
  for (std::size_t j = 0; j < hidden; ++j) {
    double sum = 0, sabs = 0;
    for (int q = 0; q < num_ranks; ++q) {
      const double v = x(q, j);
      sum += v;
      sabs += std::fabs(v);
    }
    const double es = (num_ranks - 1) * u32 * sabs + u * std::fabs(sum);
    rr[j] = sum + residual(j);
    er[j] = es + (u + u32) * (std::fabs(rr[j]) + es);
    ss += rr[j] * rr[j];
    dss += 2 * std::fabs(rr[j]) * er[j] + er[j] * er[j];
    mag2 += (std::fabs(rr[j]) + er[j]) * (std::fabs(rr[j]) + er[j]);
  }
  const double ms = ss / h, f = 1.0 / std::sqrt(ms + eps);
  const double ef = (dss / h + (h + 16) * u32 * mag2 / h) / (2 * (ms + eps)) + 3 * u32;
  rmsnorm_row out{std::vector<double>(hidden), std::vector<double>(hidden)};
  for (std::size_t j = 0; j < hidden; ++j) {
    const double w = weight(j);
    out.y[j] = rr[j] * f * w;
    out.err[j] = std::fabs(w) * f * er[j] + std::fabs(out.y[j]) * (ef + 2 * u32);
  }
  return out;
}

// |out - y| allowed for an output of type Out (T, or an FP8 format written with `scale`): doubled,
// the output's rounding included (an FP8 code: half its step, relative, and the subnormal half step).
template <class Out>
double rmsnorm_tolerance(double y, double err, double scale = 1.0) {
  if constexpr (std::is_same<Out, float>::value || std::is_same<Out, bf16>::value || std::is_same<Out, fp16>::value) {
    (void)scale;
    return 2 * (err + unit_roundoff<Out>() * (std::fabs(y) + err));
  } else {
    using tr = fp8::format_traits<Out>;
    return 2 * (err + std::ldexp(1.0, -(tr::mantissa_bits + 1)) * (std::fabs(y) + err) +
                scale * static_cast<double>(tr::min_subnormal) / 2 + 0x1p-24 * std::fabs(y));
  }
}

// One record of fused::lse_merge over N partials (O_r: attention output normalised over rank r's
// keys, L_r: the log-sum-exp of its scores, -inf for a rank without keys, whose O_r is not read):
// L = m + log(sum_r exp(L_r - m)), O = sum_r exp(L_r - L) O_r; no rank with keys: L = -inf and O
// is +0 exactly. Tolerances: the FP32 merge (each weight carries the rounding of L_r - m, |L_r - m|
// < 12, and of up to N rescalings; then N products and sums and the division) relative to
// sum_r w_r |O_r[d]|, and O's rounding to T; doubled.
struct lse_merge_row {
  double lse, lse_tol;
  std::vector<double> o, tol;
};

// lse(r) = L_r, o(r, d) = O_r[d] as T decodes it.
template <class T, class Lse, class O>
lse_merge_row lse_merge_reference(int num_ranks, int head_dim, Lse&& lse, O&& o) {
  const double u = unit_roundoff<T>(), e32 = (16.0 * num_ranks + 64) * 0x1p-24, inf = std::numeric_limits<double>::infinity();
  const std::size_t h = static_cast<std::size_t>(head_dim);
  lse_merge_row r{-inf, 0, std::vector<double>(h, 0.0), std::vector<double>(h, 0.0)};
  double m = -inf, sum = 0;
  for (int q = 0; q < num_ranks; ++q) m = std::max(m, static_cast<double>(lse(q)));
  if (m == -inf) return r;
  for (int q = 0; q < num_ranks; ++q)
    if (lse(q) != -inf) sum += std::exp(lse(q) - m);
  r.lse = m + std::log(sum);
  r.lse_tol = 2 * e32 * (std::fabs(r.lse) + 1);
  for (std::size_t d = 0; d < h; ++d) {
    double mag = 0;
    for (int q = 0; q < num_ranks; ++q) {
      if (lse(q) == -inf) continue;
      const double w = std::exp(lse(q) - r.lse), v = o(q, static_cast<int>(d));
      r.o[d] += w * v;
      mag += w * std::fabs(v);
    }
    r.tol[d] = 2 * (u * (std::fabs(r.o[d]) + e32 * mag) + e32 * mag) + 1e-30;
  }
  return r;
}

}  // namespace testing
RCCLX_NAMESPACE_END
