// tests/lpc/reference.hpp: an independent float64 model of what the low-precision collectives
// must produce: the exact result of the inputs, and the documented error bound of docs/numerics.md
// (section 8), computed from the inputs alone. Nothing here calls rcclx's FP8 or reduction code:
// the formats' constants are the specs' (OCP 8-bit FP, AMD FNUZ), blocks and chunks are cut as the
// documentation says, and the bound is the derived formula, so a wrong kernel, a wrong block
// partition or a wrong bound all make a test fail.
#pragma once

#include <rcclx/fp8/format.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../dda/reference.hpp"

namespace lpc_test {

using rcclx_test::exact;

struct format_info {
  const char* name;
  double max_finite;
  int mantissa_bits;
  int emax;  // exponent of max finite
  double h;  // half the smallest subnormal
};

template <class F>
format_info info();
template <>
inline format_info info<rcclx::fp8::e4m3>() { return {"e4m3", 448.0, 3, 8, 0x1p-10}; }
template <>
inline format_info info<rcclx::fp8::e5m2>() { return {"e5m2", 57344.0, 2, 15, 0x1p-17}; }
template <>
inline format_info info<rcclx::fp8::e4m3_fnuz>() { return {"e4m3_fnuz", 240.0, 3, 7, 0x1p-11}; }
template <>
inline format_info info<rcclx::fp8::e5m2_fnuz>() { return {"e5m2_fnuz", 57344.0, 2, 15, 0x1p-18}; }

// How one collective call quantizes: the format, the scale kind, the block size.
struct quant_model {
  format_info f;
  bool e8m0;
  int block;

  // Bound on |dequantize(quantize(x)) - x| for every element of a block whose largest finite |x|
  // is a (numerics.md 7 and 8). Above the scale floor the block's amax maps near max finite, so the
  // error is half a top-binade step times the scale: c * a with c = 2^(emax-M-1) / max (fp32 scale;
  // twice that for a power-of-two scale); at the floor (scale 2^-126) an element is off by at most
  // half its own step, 2^-(M+1) |x|, or the subnormal half step h * 2^-126. Made monotone in a (the
  // floor bound can exceed c * a just below the threshold), with 2^-19 relative slack for the fp32
  // roundings of the scaling.
  double q(double a) const {
    const double slack = 1.0 + 0x1p-19;
    const double floor_amax = f.max_finite * 0x1p-126;
    const double floor_bound = [&](double x) {
      return std::ldexp(1.0, -(f.mantissa_bits + 1)) * x * slack + f.h * 0x1p-126;
    }(std::min(a, floor_amax));
    if (a < floor_amax) return floor_bound;
    const double c = std::ldexp(1.0, f.emax - f.mantissa_bits - 1) / f.max_finite * (e8m0 ? 2.0 : 1.0);
    return std::max(c * a * slack, floor_bound);
  }
};

template <class T>
inline bool finite(T x) {
  return std::isfinite(exact(x));
}

// Largest finite |x| of in[first, last).
template <class T>
inline double block_amax(const std::vector<T>& in, std::size_t first, std::size_t last) {
  double a = 0;
  for (std::size_t i = first; i < last; ++i) {
    const double x = exact(in[i]);
    if (std::isfinite(x)) a = std::max(a, std::fabs(x));
  }
  return a;
}

// What one output element must be: value within tol, or NaN.
struct expect {
  double value = 0;
  double tol = 0;
  bool nan = false;
};

// Output rounding to T (nearest even) of a value within `tol` of `value`, plus the float32
// spacing near zero that dequantized fp32 products and sums can land on.
template <class T>
inline double with_output_rounding(double value, double tol) {
  return tol + rcclx_test::type_info<T>::u * (std::fabs(value) + tol) + 0x1p-148;
}

// ---- the four collectives ----------------------------------------------------------------------------

// ReduceOp over ranks of blocks quantized independently: each input element x_p has error <= q_p;
// sum: the errors add, and the fp32 accumulation of N terms adds <= N u32 sum |x^_p|; min/max: the
// result is one of the x^_p, off by at most max q_p.
struct combined {
  double value, err;
  bool nan;
};
template <class T>
inline combined combine(const std::vector<std::vector<T>>& in, std::size_t i, const std::vector<double>& q,
                        rcclx::reduce_op op) {
  const int n = static_cast<int>(in.size());
  combined c{0, 0, false};
  double mag = 0;
  for (int p = 0; p < n; ++p) {
    const double x = exact(in[p][i]);
    if (!std::isfinite(x)) c.nan = true;  // NaN in; Inf becomes NaN in low precision
    if (p == 0) c.value = x;
    else if (op == rcclx::reduce_op::sum) c.value += x;
    else if (op == rcclx::reduce_op::min) c.value = std::min(c.value, x);
    else c.value = std::max(c.value, x);
    if (op == rcclx::reduce_op::sum) c.err += q[p];
    else c.err = std::max(c.err, q[p]);
    mag += std::fabs(x) + q[p];
  }
  if (op == rcclx::reduce_op::sum) c.err += n * 0x1p-24 * mag;
  return c;
}

// AllReduce: chunks are whole blocks, so block b of the message is elements [b*B, b*B + B) of every
// rank. Two quantizations: every input block, then the reduced block (whose amax is at most the
// largest |exact| + error of its elements).
template <class T>
inline std::vector<expect> allreduce(const std::vector<std::vector<T>>& in, const quant_model& m,
                                     rcclx::reduce_op op) {
  const int n = static_cast<int>(in.size());
  const std::size_t count = in[0].size(), bs = static_cast<std::size_t>(m.block);
  std::vector<expect> out(count);
  for (std::size_t b0 = 0; b0 < count; b0 += bs) {
    const std::size_t b1 = std::min(count, b0 + bs);
    std::vector<double> q(n);
    for (int p = 0; p < n; ++p) q[p] = m.q(block_amax(in[p], b0, b1));
    std::vector<combined> c;
    double amax_y = 0;
    for (std::size_t i = b0; i < b1; ++i) {
      c.push_back(combine(in, i, q, op));
      if (!c.back().nan) amax_y = std::max(amax_y, std::fabs(c.back().value) + c.back().err);
    }
    const double qy = m.q(amax_y);
    for (std::size_t i = b0; i < b1; ++i) {
      const combined& ci = c[i - b0];
      out[i] = {ci.value, with_output_rounding<T>(ci.value, ci.err + qy), ci.nan};
    }
  }
  return out;
}

// AllGather: output block p = rank p's input after one quantization (blocks of the rank's input).
template <class T>
inline std::vector<expect> allgather(const std::vector<std::vector<T>>& in, const quant_model& m) {
  const std::size_t count = in[0].size(), bs = static_cast<std::size_t>(m.block);
  std::vector<expect> out;
  for (const auto& x : in) {
    for (std::size_t b0 = 0; b0 < count; b0 += bs) {
      const std::size_t b1 = std::min(count, b0 + bs);
      const double q = m.q(block_amax(x, b0, b1));
      for (std::size_t i = b0; i < b1; ++i) {
        const double v = exact(x[i]);
        out.push_back({v, with_output_rounding<T>(v, q), !std::isfinite(v)});
      }
    }
  }
  return out;
}

// ReduceScatter, rank r: block r (C = count / N elements) of every rank, quantized in blocks that
// start at the block's first element.
template <class T>
inline std::vector<expect> reduce_scatter(const std::vector<std::vector<T>>& in, int r, const quant_model& m,
                                          rcclx::reduce_op op) {
  const int n = static_cast<int>(in.size());
  const std::size_t c_elems = in[0].size() / static_cast<std::size_t>(n), bs = static_cast<std::size_t>(m.block);
  const std::size_t base = static_cast<std::size_t>(r) * c_elems;
  std::vector<expect> out(c_elems);
  for (std::size_t b0 = 0; b0 < c_elems; b0 += bs) {
    const std::size_t b1 = std::min(c_elems, b0 + bs);
    std::vector<double> q(n);
    for (int p = 0; p < n; ++p) q[p] = m.q(block_amax(in[p], base + b0, base + b1));
    for (std::size_t j = b0; j < b1; ++j) {
      const combined c = combine(in, base + j, q, op);
      out[j] = {c.value, with_output_rounding<T>(c.value, c.err), c.nan};
    }
  }
  return out;
}

// AlltoAll, rank r: output block p = rank p's input block r (one quantization; the own block exact).
template <class T>
inline std::vector<expect> alltoall(const std::vector<std::vector<T>>& in, int r, const quant_model& m) {
  const int n = static_cast<int>(in.size());
  const std::size_t c_elems = in[0].size() / static_cast<std::size_t>(n), bs = static_cast<std::size_t>(m.block);
  const std::size_t base = static_cast<std::size_t>(r) * c_elems;
  std::vector<expect> out;
  for (int p = 0; p < n; ++p) {
    for (std::size_t b0 = 0; b0 < c_elems; b0 += bs) {
      const std::size_t b1 = std::min(c_elems, b0 + bs);
      const double q = p == r ? 0.0 : m.q(block_amax(in[p], base + b0, base + b1));
      for (std::size_t j = b0; j < b1; ++j) {
        const double v = exact(in[p][base + j]);
        if (p == r) out.push_back({v, 0.0, std::isnan(v)});  // copied, bit for bit
        else out.push_back({v, with_output_rounding<T>(v, q), !std::isfinite(v)});
      }
    }
  }
  return out;
}

// First element of `got` that violates `want` ("" if none): NaN exactly where expected, every
// other element finite and within its bound; *worst gets the largest error / bound ratio seen.
template <class T>
inline std::string first_violation(const std::vector<T>& got, const std::vector<expect>& want, double* worst = nullptr) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " != expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = exact(got[i]);
    const expect& e = want[i];
    bool ok;
    if (e.nan) {
      ok = std::isnan(g);
    } else if (e.tol == 0) {
      ok = g == e.value;  // copied exactly (also an infinity)
    } else {
      const double err = std::fabs(g - e.value);
      ok = std::isfinite(g) && err <= e.tol;
      if (worst && e.tol > 0 && std::isfinite(err)) *worst = std::max(*worst, err / e.tol);
    }
    if (!ok) {
      char buf[256];
      std::snprintf(buf, sizeof(buf), "element %zu: got %.9g, expected %s%.9g +- %.3g", i, g, e.nan ? "NaN, not " : "",
                    e.value, e.tol);
      return buf;
    }
  }
  return "";
}

}  // namespace lpc_test
