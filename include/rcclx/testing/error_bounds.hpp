// rcclx/testing/error_bounds.hpp: how far a result of rcclx may be from the exact one, as numbers
// a test or a benchmark compares its float64 errors with: the documented bounds of the plain
// AllReduce (an FP32 rank-order sum rounded to T) and of the low-precision collectives
// (docs/numerics.md sections 7 and 8: FP8 blocks with a scale each, FP32 sums), a summary of many
// elements' errors, computed on several host threads (parallel_indices), and a rank's output of a
// collective checked against the float64 result of every rank's inputs (check_collective).
//
//   namespace rt = rcclx::testing;
//   rt::error_summary s = rt::summarize_errors(count, [&](std::size_t i, rt::error_summary& e) {
//     e.add(out[i], exact[i], rt::allreduce_tolerance<rcclx::bf16>(rcclx::reduce_op::sum, n, exact[i], sum_abs[i]));
//   });                                                   // s.max_error, s.within
//   double b = rt::lpc_error_bound<rcclx::bf16>(rcclx::lpc::collective::allreduce, n);   // inputs in [-1, 1]
//   s = rt::check_collective(rcclx::lpc::collective::allgather, out, n, count, rank, [&](int p, std::size_t j) { return x(p, j); });
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <thread>
#include <type_traits>
#include <vector>

#include "../core/ops.hpp"
#include "../core/types.hpp"
#include "../fp8/format.hpp"
#include "../lpc/config.hpp"
#include "../lpc/workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// Unit roundoff of T (half its spacing at 1): float 2^-24, bf16 2^-8, fp16 2^-11.
template <class T>
constexpr double unit_roundoff() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, bf16>::value || std::is_same<T, fp16>::value,
                "unit_roundoff: float, bf16 or fp16");
  return std::is_same<T, float>::value ? 0x1p-24 : std::is_same<T, bf16>::value ? 0x1p-8 : 0x1p-11;
}

// One output element of a plain AllReduce (dda flat or tree) of N inputs of T: the FP32 sum in rank
// order (N - 1 roundings, each within 2^-24 of the running |sum| <= sum_abs; doubled), rounded once
// to T (fp16: plus half its smallest subnormal). min and max are exact.
template <class T>
double allreduce_tolerance(reduce_op op, int num_ranks, double exact, double sum_abs) {
  if (op != reduce_op::sum) return 0.0;
  const double acc = 2.0 * (num_ranks - 1) * 0x1p-24 * sum_abs;
  return unit_roundoff<T>() * (std::fabs(exact) + acc) + acc + (std::is_same<T, fp16>::value ? 0x1p-25 : 0.0);
}

// |dequantize(quantize(x)) - x| for every element of a block whose largest finite |x| is amax
// (numerics.md 7, 8): c * amax above the scale floor, c = 2^(emax-M-1) / max_finite (twice that
// with power-of-two scales); at the floor (scale 2^-126) half an element's own step or the
// subnormal half step. Monotone in amax, with 2^-19 relative slack for the FP32 roundings of the
// scaling.
template <class Format, fp8::scale_kind Scale = fp8::scale_kind::fp32>
double fp8_block_error(double amax) {
  using tr = fp8::format_traits<Format>;
  const double slack = 1.0 + 0x1p-19, floor_amax = static_cast<double>(tr::max_finite) * 0x1p-126;
  const double floor_bound = std::ldexp(1.0, -(tr::mantissa_bits + 1)) * std::min(amax, floor_amax) * slack +
                             static_cast<double>(tr::min_subnormal) / 2 * 0x1p-126;
  if (amax < floor_amax) return floor_bound;
  const double c = std::ldexp(1.0, tr::max_exponent - tr::mantissa_bits - 1) / static_cast<double>(tr::max_finite) *
                   (Scale == fp8::scale_kind::e8m0 ? 2.0 : 1.0);
  return std::max(c * amax * slack, floor_bound);
}

// The error of an FP32 sum in rank order of N terms, each off by its quantization error (numerics.md
// 8): sum_q = the terms' errors, sum_abs = the sum of |term|. The recursive sum adds at most
// N u sum(|x| + q) (first order; N u also covers the second order and a fused multiply-add).
inline double fp32_sum_error(int terms, double sum_q, double sum_abs) {
  return sum_q + terms * 0x1p-24 * (sum_abs + sum_q);
}

// That sum rounded once to T, against the exact sum `exact` (ReduceScatter's bound). With sum_q = 0:
// a plain FP32 sum of N terms.
template <class T>
double quantized_sum_bound(int terms, double sum_q, double sum_abs, double exact) {
  const double e = fp32_sum_error(terms, sum_q, sum_abs);
  return e + unit_roundoff<T>() * (std::fabs(exact) + e);
}

// The documented bound of an LPC collective with Config on num_ranks ranks when every input
// element has |x| <= amax (every block's amax is at most amax): |out - exact| <= this for every
// element (numerics.md 8). quantized = false: the same call without FP8 (the plain collective:
// the copies exact, the sums those of quantized_sum_bound without quantization error).
template <class T, class Config = lpc::default_config>
double lpc_error_bound(lpc::collective c, int num_ranks, double amax = 1.0, bool quantized = true) {
  const auto q = [&](double a) { return quantized ? fp8_block_error<typename Config::format, Config::scale>(a) : 0.0; };
  const double n = num_ranks;
  switch (c) {
    case lpc::collective::allgather:
    case lpc::collective::alltoall: return quantized ? q(amax) + unit_roundoff<T>() * (amax + q(amax)) : 0.0;
    case lpc::collective::reduce_scatter: return quantized_sum_bound<T>(num_ranks, n * q(amax), n * amax, n * amax);
    case lpc::collective::allreduce:
    default: {  // the owner's sum, re-quantized from a block amax of at most |sum| + E
      const double e = fp32_sum_error(num_ranks, n * q(amax), n * amax), y = n * amax + e;
      return e + q(y) + unit_roundoff<T>() * (y + q(y));
    }
  }
}

// The errors of many elements: the largest |got - want| (NaN once any is NaN) and whether every
// element was within its tolerance (a NaN is not).
struct error_summary {
  double max_error = 0;
  bool within = true;

  void add(double error, bool ok) {
    if (!std::isnan(max_error) && !(error <= max_error)) max_error = error;
    within = within && ok;
  }
  void add(double got, double want, double tol) {
    const double e = std::fabs(got - want);
    add(e, e <= tol);
  }
  void merge(const error_summary& o) {
    add(o.max_error, o.within);
  }
};

// f(w, i) for every i in [0, items) on W = min(max_workers, cores) host threads, worker w taking
// i = w, w + W, ...; returns W. For references of large messages (a 256 MiB row is 64M+ elements).
template <class F>
unsigned parallel_indices(std::size_t items, F&& f, unsigned max_workers = 16) {
  const unsigned workers = std::max(1u, std::min(max_workers, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (unsigned w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (std::size_t i = w; i < items; i += workers) f(w, i);
    });
  for (auto& t : threads) t.join();
  return workers;
}

// check(i, summary) for every i in [0, items) (parallel_indices), each worker adding to a summary
// of its own; their merge.
template <class Check>
error_summary summarize_errors(std::size_t items, Check&& check, unsigned max_workers = 16) {
  std::vector<error_summary> part(max_workers);
  const unsigned workers = parallel_indices(items, [&](unsigned w, std::size_t i) { check(i, part[w]); }, max_workers);
  error_summary all;
  for (unsigned w = 0; w < workers; ++w) all.merge(part[w]);
  return all;
}

// Rank `rank`'s output out of collective c over num_ranks ranks of `count` input elements each,
// against x(p, j) (rank p's input element j as T decodes it): AllReduce out[i] = op over p of x(p, i)
// (count elements); AllGather out[p * count + j] = x(p, j); ReduceScatter out[i] = sum over p of
// x(p, rank * count / N + i) (count / N); AlltoAll out[p * b + j] = x(p, rank * b + j), b = count / N.
// Each element within `bound` of the float64 result, or (bound 0) the plain collective's: the
// FP32 rank-order sum's allreduce_tolerance, copies exact.
template <class T, class X>
error_summary check_collective(lpc::collective c, const T* out, int num_ranks, std::size_t count, int rank, X&& x,
                               double bound = 0, reduce_op op = reduce_op::sum) {
  using lc = lpc::collective;
  const std::size_t n = static_cast<std::size_t>(num_ranks), b = count / n, r = static_cast<std::size_t>(rank);
  const std::size_t elems = c == lc::allgather ? count * n : c == lc::reduce_scatter ? b : count;
  return summarize_errors(elems, [&](std::size_t i, error_summary& e) {
    double want = 0, mag = 0;
    if (c == lc::allreduce || c == lc::reduce_scatter) {
      const std::size_t j = c == lc::allreduce ? i : r * b + i;
      for (int p = 0; p < num_ranks; ++p) {
        const double v = x(p, j);
        mag += std::fabs(v);
        want = p == 0 ? v : op == reduce_op::sum ? want + v : op == reduce_op::min ? std::min(want, v) : std::max(want, v);
      }
    } else {
      want = c == lc::allgather ? x(static_cast<int>(i / count), i % count) : x(static_cast<int>(i / b), r * b + i % b);
    }
    const bool reduced = c == lc::allreduce || c == lc::reduce_scatter;
    e.add(static_cast<float>(out[i]), want, bound > 0 ? bound : reduced ? allreduce_tolerance<T>(op, num_ranks, want, mag) : 0.0);
  });
}

}  // namespace testing
RCCLX_NAMESPACE_END
