// Determinism as a tested contract (docs/numerics.md, "Determinism"): the plain (non-FP8) AllReduce
// gives element i the bits of
//
//     acc = float(x_0[i]); acc = acc + float(x_1[i]); ...; acc = acc + float(x_{N-1}[i]);  T(acc)
//
// (rank order 0..N-1, FP32 accumulation for bf16/fp16, one final round-to-nearest-even; min/max in
// the same order, a tie keeping the lower rank's value; int32 sums wrap), on every rank, whatever
// the message size, the element's offset in the message, the algorithm (flat, with or without the
// LL one-shot, tree, automatic), the grid (blocks per rank, threads per block), in place or not,
// the emulated launch or the per-rank launcher, and fused or not (AllReduce + residual + RMSNorm's
// new residual, the tile-level AllReduce's epilogue values).
//
// Inputs are a pure function of (rank, logical element id), so one logical element can be put at
// different offsets of messages of different sizes. They mix magnitudes 2^-10..2^10, signs, exact
// cancellations of large values (so FP32 rounding errors reach the bits of bf16/fp16 results),
// signed zeros and ties; the first test case checks that another summation order changes a good
// fraction of the results, i.e. that these tests can see the order. The reference never calls
// rcclx's conversion or reduction code: it decodes and rounds with its own functions (checked
// against an exhaustive nearest-value table in the first test case) and compares bits exactly.
// The same source runs on the host backend and on a GPU.
#include <rcclx/dda/allreduce.hpp>
#include <rcclx/fused/allreduce_rmsnorm.hpp>
#include <rcclx/fused/epilogue.hpp>
#include <rcclx/fused/stages.hpp>
#include <rcclx/fused/tile_allreduce.hpp>
#include <rcclx/lpc/select.hpp>
#include <rcclx/testing/emulated_fused_kernels.hpp>
#include <rcclx/testing/emulated_world.hpp>
#include <rcclx/testing/launch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../support/bits.hpp"
#include "../support/catch.hpp"
#include "../support/launchers.hpp"
#include "../support/emulated_peers.hpp"
#include "../support/rank_runner.hpp"

namespace {

namespace fz = rcclx::fused;
namespace rt = rcclx::testing;
using rcclx::algorithm;
using rcclx::reduce_op;
using rcclx::bf16;
using rcclx::fp16;
constexpr int max_r = 8;
constexpr bool on_host = rcclx::current_backend == rcclx::backend::host;

// ThreadSanitizer (host) and compute-sanitizer (GPU, RCCLX_TEST_QUICK=1): a sample of the cases.
const bool sampled = rcclx_test::tsan || rcclx_test::quick();

// ---- inputs: a pure function of (rank, logical element id) -----------------------------------------

using rcclx_test::mix;

// Bit layout of a floating element type: mantissa bits, exponent bias, sign position.
template <class T>
struct layout_of;
template <>
struct layout_of<float> {
  static constexpr int mant = 23, bias = 127, sign = 31;
};
template <>
struct layout_of<bf16> {
  static constexpr int mant = 7, bias = 127, sign = 15;
};
template <>
struct layout_of<fp16> {
  static constexpr int mant = 10, bias = 15, sign = 15;
};

template <class T>
RCCLX_HOST_DEVICE inline std::uint32_t make_bits(std::uint64_t sign, int exp, std::uint64_t mant) {
  using L = layout_of<T>;
  return (static_cast<std::uint32_t>(sign & 1u) << L::sign) |
         (static_cast<std::uint32_t>(exp + L::bias) << L::mant) |
         static_cast<std::uint32_t>(mant & ((std::uint64_t{1} << L::mant) - 1u));
}

// The raw bits of rank `rank`'s element with logical id `id`. Floating types, by the element's mode
// (the same on every rank; the values differ by rank):
//   3/8  every rank an independent normal value: random sign, exponent in [-10, 10], random mantissa;
//   1/2  cancellation: two adjacent ranks k, k + 1 hold +B and -B (B in [2^8, 2^11), k in {0, 1}
//        three times in four, else in 0..6), every other rank a small value (exponent in
//        [-10, -7], random sign). In FP32, small values added while a big one is in the sum lose
//        their low bits and those added after the pair cancelled keep them, so which ranks come
//        before the pair shows in the result's bits, for bf16 and fp16 results too;
//   1/8  signed zeros and ties: +-0 or +-2^k (k in 0..2, the same for every rank), for min/max ties.
// With fewer than k + 2 ranks an element has only one or neither of the cancelling values.
// int32: full-range values (sums wrap), small ones, near the extremes, ties.
template <class T>
RCCLX_HOST_DEVICE inline std::uint32_t input_bits(int rank, std::uint64_t id) {
  const std::uint64_t he = mix(id * 0xD1B54A32D192ED03ull + 0x2545F4914F6CDD1Dull);  // the element
  // its value on `rank`:
  const std::uint64_t hr = mix(he ^ (static_cast<std::uint64_t>(rank) + 1u) * 0x632BE59BD9B4E019ull);
  if constexpr (std::is_same<T, std::int32_t>::value) {
    switch (he % 4) {
      case 0: return static_cast<std::uint32_t>(hr >> 16);
      case 1: return static_cast<std::uint32_t>(static_cast<std::int32_t>(hr % 2001) - 1000);
      case 2: {
        const auto d = static_cast<std::uint32_t>((hr >> 1) % 4);
        return (hr & 1u) ? 0x7FFFFFFFu - d : 0x80000000u + d;
      }
      default: return static_cast<std::uint32_t>(static_cast<std::int32_t>((he >> 8) % 5) - 2);
    }
  } else {
    const std::uint64_t mode = he % 8;
    if (mode >= 3 && mode <= 6) {
      const int k = ((he >> 6) & 3u) ? static_cast<int>((he >> 8) % 2) : static_cast<int>((he >> 8) % 7);
      const int big_exp = 8 + static_cast<int>((he >> 24) % 3);
      const std::uint64_t sign = (he >> 20) & 1u;
      if (rank == k) return make_bits<T>(sign, big_exp, he >> 32);
      if (rank == k + 1) return make_bits<T>(sign ^ 1u, big_exp, he >> 32);
      return make_bits<T>(hr, -10 + static_cast<int>((hr >> 1) % 4), hr >> 8);
    }
    if (mode == 7) {
      if (hr & 2u) return static_cast<std::uint32_t>(hr & 1u) << layout_of<T>::sign;  // +-0
      return make_bits<T>(hr, static_cast<int>((he >> 8) % 3), 0);
    }
    return make_bits<T>(hr, -10 + static_cast<int>((hr >> 1) % 21), hr >> 8);
  }
}

template <class T>
RCCLX_HOST_DEVICE inline T from_bits(std::uint32_t b) {
  if constexpr (std::is_same<T, float>::value) {
    float f;
    __builtin_memcpy(&f, &b, 4);
    return f;
  } else if constexpr (std::is_same<T, std::int32_t>::value) {
    return static_cast<std::int32_t>(b);
  } else {
    return T::from_bits(static_cast<std::uint16_t>(b));
  }
}

template <class T>
RCCLX_HOST_DEVICE inline T input_value(int rank, std::uint64_t id) {
  return from_bits<T>(input_bits<T>(rank, id));
}

template <class T>
std::uint32_t bits_of(const T& x) {
  if constexpr (sizeof(T) == 2) {
    std::uint16_t b;
    std::memcpy(&b, &x, 2);
    return b;
  } else {
    std::uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
  }
}

// ---- the independent reference ---------------------------------------------------------------------
// Decoding and rounding written from the formats' definitions (not rcclx's converters): values
// are computed in double, where every step below is exact; rounding uses nearbyint (the default
// rounding mode, ties to even). NaN never occurs in these tests' inputs or results.

float widen_float(std::uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
float widen_bf16(std::uint32_t b) {  // bf16 is the top half of a binary32
  return widen_float(b << 16);
}
float widen_fp16(std::uint32_t h) {
  const int s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (e == 0) v = std::ldexp(m, -24);
  else v = std::ldexp(1024 + m, e - 25);
  return static_cast<float>(s ? -v : v);
}

// |f| rounded to a multiple of 2^(exponent of |f| - Significand + 1), no finer than 2^MinQuantum.
double round_significand(double a, int significand, int min_quantum) {
  int e;
  (void)std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  const int q = std::max(e - significand, min_quantum);
  return std::ldexp(std::nearbyint(std::ldexp(a, -q)), q);
}

std::uint32_t narrow_bf16(float f) {
  const std::uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0) return sign;
  const double r = round_significand(a, 8, -133);  // 8 significant bits; subnormals are multiples of 2^-133
  if (r >= 0x1p128) return sign | 0x7F80u;         // overflow: infinity
  std::uint32_t u;
  const float rf = static_cast<float>(r);  // exact: r has at most 8 significant bits
  std::memcpy(&u, &rf, 4);
  return sign | (u >> 16);
}

std::uint32_t narrow_fp16(float f) {
  const std::uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0) return sign;
  const double r = round_significand(a, 11, -24);  // 11 significant bits; subnormals are multiples of 2^-24
  if (r > 65504.0) return sign | 0x7C00u;          // rounds past the largest finite value: infinity
  if (r < 0x1p-14) return sign | static_cast<std::uint32_t>(std::ldexp(r, 24));  // subnormal
  int e;
  (void)std::frexp(r, &e);  // r in [2^(e-1), 2^e)
  const int E = e - 1;
  const auto mant = static_cast<std::uint32_t>(std::ldexp(r, 10 - E)) - 1024u;
  return sign | (static_cast<std::uint32_t>(E + 15) << 10) | mant;
}

template <class T>
float widen(std::uint32_t b) {
  if constexpr (std::is_same<T, float>::value) return widen_float(b);
  else if constexpr (std::is_same<T, bf16>::value) return widen_bf16(b);
  else return widen_fp16(b);
}
template <class T>
std::uint32_t narrow(float f) {
  if constexpr (std::is_same<T, float>::value) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  } else if constexpr (std::is_same<T, bf16>::value) {
    return narrow_bf16(f);
  } else {
    return narrow_fp16(f);
  }
}

// The order in which the reference combines the ranks: the contract's, and two others that only
// the first test case (and the failure messages) use.
enum class order { rank_order, reversed, last_first };
int rank_at(order o, int n, int k) {
  switch (o) {
    case order::reversed: return n - 1 - k;
    case order::last_first: return (k + n - 1) % n;
    case order::rank_order:
    default: return k;
  }
}

// The result bits of logical element `id` over ranks 0..n-1.
template <class T>
std::uint32_t reference_bits(reduce_op op, int n, std::uint64_t id, order o = order::rank_order) {
  if constexpr (std::is_same<T, std::int32_t>::value) {
    std::uint32_t acc = input_bits<T>(rank_at(o, n, 0), id);
    for (int k = 1; k < n; ++k) {
      const std::uint32_t x = input_bits<T>(rank_at(o, n, k), id);
      const auto sx = static_cast<std::int32_t>(x), sa = static_cast<std::int32_t>(acc);
      if (op == reduce_op::sum) acc += x;  // wraps modulo 2^32
      else if (op == reduce_op::min) acc = sx < sa ? x : acc;
      else acc = sx > sa ? x : acc;
    }
    return acc;
  } else {
    float acc = widen<T>(input_bits<T>(rank_at(o, n, 0), id));
    for (int k = 1; k < n; ++k) {
      const float x = widen<T>(input_bits<T>(rank_at(o, n, k), id));
      if (op == reduce_op::sum) acc = acc + x;          // FP32
      else if (op == reduce_op::min) acc = x < acc ? x : acc;  // a tie keeps the earlier rank's value
      else acc = x > acc ? x : acc;
    }
    return narrow<T>(acc);  // one rounding
  }
}

std::string hex(std::uint32_t b, std::size_t bytes) {
  char s[16];
  std::snprintf(s, sizeof s, bytes == 2 ? "0x%04x" : "0x%08x", b);
  return s;
}

const char* type_name_of(float) { return "float"; }
const char* type_name_of(bf16) { return "bf16"; }
const char* type_name_of(fp16) { return "fp16"; }
const char* type_name_of(std::int32_t) { return "int32"; }

// A message: `size` elements whose element i is logical element base + i.
struct window {
  std::size_t size;
  std::uint64_t base;
};

template <class T>
std::vector<std::uint32_t> expected_bits(reduce_op op, int n, window w) {
  std::vector<std::uint32_t> e(w.size);
  for (std::size_t i = 0; i < w.size; ++i) e[i] = reference_bits<T>(op, n, w.base + i);
  return e;
}

// got[i] (rank `rank`'s output of the message `w`) against the reference bits, exactly. On a
// mismatch the message names the case, the rank, how many elements differ, the first one with its
// logical id and both bit patterns, and whether it is what another summation order would give.
template <class T>
void require_reference(const std::string& what, const T* got, const std::vector<std::uint32_t>& want, window w,
                       reduce_op op, int n, int rank) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (bits_of(got[i]) != want[i]) {
      if (bad == 0) first = i;
      ++bad;
    }
  }
  std::string msg;
  if (bad) {
    const std::uint64_t id = w.base + first;
    const std::uint32_t g = bits_of(got[first]);
    msg = what + ": rank " + std::to_string(rank) + " of " + std::to_string(n) + ": " + std::to_string(bad) + " of " +
          std::to_string(want.size()) +
          " elements differ from the rank-order (0..N-1) FP32 reference; first: element " +
          std::to_string(first) + " (logical id " + std::to_string(id) + "): got " + hex(g, sizeof(T)) + ", expected " +
          hex(want[first], sizeof(T));
    // What another order would have given there (N = 2 sums cannot tell: IEEE addition commutes).
    std::string also;
    if (g == reference_bits<T>(op, n, id, order::reversed)) also += "reverse rank order N-1..0";
    if (g == reference_bits<T>(op, n, id, order::last_first))
      also += std::string(also.empty() ? "" : ", and ") + "starting from the last rank (N-1, 0, 1, ..., N-2)";
    if (!also.empty()) msg += " (= the result in " + also + ")";
  }
  INFO(msg);
  REQUIRE(bad == 0);
}

template <class T>
std::string case_name(const char* what, int n, window w, reduce_op op, const std::string& algo) {
  return std::string(what) + " " + type_name_of(T{}) + " " + rcclx::to_string(op) + " " + algo + ", N = " +
         std::to_string(n) + ", size " + std::to_string(w.size) + " at logical id " + std::to_string(w.base);
}
template <class T>
std::string case_name(const char* what, int n, window w, reduce_op op, algorithm a) {
  return case_name<T>(what, n, w, op, std::string(rcclx::to_string(a)));
}

template <class T>
void fill(rcclx_test::shared_peers<T>& peers, window w) {
  for (int r = 0; r < peers.num_ranks(); ++r)
    for (std::size_t i = 0; i < w.size; ++i) peers.input(r)[i] = input_value<T>(r, w.base + i);
}

// Every rank's output of the last call against the reference.
template <class T>
void require_all_ranks(const std::string& what, const rcclx_test::shared_peers<T>& peers,
                       const std::vector<std::uint32_t>& want, window w, reduce_op op) {
  for (int r = 0; r < peers.num_ranks(); ++r)
    require_reference(what, peers.output(r).data(), want, w, op, peers.num_ranks(), r);
}

// automatic picks low precision only when the environment enables it (lpc/select.hpp); that is
// outside this contract (docs/numerics.md), so automatic is then left out, visibly.
template <class T>
bool automatic_is_plain(std::size_t count, int n) {
  if (rcclx::lpc::resolve_algorithm<T>(rcclx::lpc::collective::allreduce, algorithm::automatic, count, n) ==
      algorithm::low_precision) {
    WARN("RCCL_LOW_PRECISION_ENABLE* selects low precision for automatic: automatic not checked");
    return false;
  }
  return true;
}

// One device array of `count` elements per rank, freed at the end of the scope (also when a
// REQUIRE throws).
template <class T>
struct device_arrays {
  std::vector<T*> p;
  device_arrays(int n, std::size_t count) {
    for (int r = 0; r < n; ++r) p.push_back(static_cast<T*>(rcclx::gpu::device_malloc(count * sizeof(T) + 16)));
  }
  device_arrays(const device_arrays&) = delete;
  device_arrays& operator=(const device_arrays&) = delete;
  ~device_arrays() {
    for (T* q : p) rcclx::gpu::device_free(q);
  }
  T* operator[](int r) const { return p[static_cast<std::size_t>(r)]; }
};

// Messages of different sizes over overlapping ranges of logical ids: logical id 1000 is element 0,
// 3, 10, 500, 997 and 983 of them (lanes 0, 3, 2, 4, 5 and 7 of a bf16/fp16 vector of 8 elements).
const std::vector<window>& windows() {
  static const std::vector<window> w{{1, 1000}, {7, 997}, {33, 990}, {1000, 500}, {4096 + 3, 3}, {100000, 17}};
  return w;
}

}  // namespace

TEST_CASE("determinism: the reference rounds to nearest even, and the summation order shows in its bits",
          "[dda][determinism]") {
  SECTION("narrow_bf16 / narrow_fp16 against an exhaustive nearest-value table") {
    for (const bool half : {false, true}) {
      CAPTURE(half);
      // Every non-negative finite code in increasing order, then the infinity code as the value
      // that overflowing results round to (2^128 for bf16, 2^16 for fp16: one step past the top).
      std::vector<double> value;
      std::vector<std::uint32_t> code;
      const std::uint32_t top = half ? 0x7BFFu : 0x7F7Fu;
      for (std::uint32_t c = 0; c <= top; ++c) {
        value.push_back(half ? widen_fp16(c) : widen_bf16(c));
        code.push_back(c);
      }
      value.push_back(half ? 65536.0 : 0x1p128);
      code.push_back(half ? 0x7C00u : 0x7F80u);
      const auto narrow_any = [&](float f) { return half ? narrow_fp16(f) : narrow_bf16(f); };
      // Nearest code by value, a tie going to the even code.
      const auto oracle = [&](float f) {
        const double a = std::fabs(static_cast<double>(f));
        const std::uint32_t sign = std::signbit(f) ? 0x8000u : 0u;
        const auto hi = static_cast<std::size_t>(std::lower_bound(value.begin(), value.end(), a) - value.begin());
        if (hi == 0) return sign | code[0];
        if (hi == value.size()) return sign | code.back();
        const double dl = a - value[hi - 1], dh = value[hi] - a;
        const std::size_t k = dl < dh ? hi - 1 : dh < dl ? hi : (code[hi - 1] % 2 == 0 ? hi - 1 : hi);
        return sign | code[k];
      };
      std::size_t bad = 0, checked = 0;
      std::string first;
      const auto check = [&](float f) {
        for (const float x : {f, -f}) {
          ++checked;
          if (narrow_any(x) != oracle(x)) {
            if (bad++ == 0) first = std::to_string(x) + ": " + hex(narrow_any(x), 2) + " vs " + hex(oracle(x), 2);
          }
        }
      };
      for (std::size_t k = 0; k + 1 < value.size(); ++k) {
        const float mid = static_cast<float>((value[k] + value[k + 1]) / 2);  // exact in float
        check(static_cast<float>(value[k]));
        check(mid);
        check(std::nextafter(mid, 0.0f));
        check(std::nextafter(mid, std::numeric_limits<float>::infinity()));
      }
      std::mt19937_64 g(7);
      for (int k = 0; k < (sampled ? 50000 : 200000); ++k) {
        std::uint32_t u = static_cast<std::uint32_t>(g()) & 0x7FFFFFFFu;
        if (half) u = 0x30000000u + u % 0x17800000u;  // 2^-31 .. 2^16: subnormals to overflow
        else if (u >= 0x7F800000u) continue;          // finite only
        check(widen_float(u));
      }
      CAPTURE(checked, first);
      REQUIRE(bad == 0);
    }
  }

  SECTION("another summation order changes the bits of many elements (so the tests can see the order)") {
    // Measured with these inputs over logical ids 0..19999, N = 3..8: the reversed order changes
    // 52-71% of the float results, 16-22% of bf16's, 37-41% of fp16's; starting from the last rank
    // 31-64%, 11-16%, 19-40%. N = 2 cannot differ (IEEE addition commutes).
    const auto fraction = [](auto tag, int n, order o) {
      using T = decltype(tag);
      std::size_t differ = 0;
      const std::size_t ids = 20000;
      for (std::uint64_t id = 0; id < ids; ++id)
        if (reference_bits<T>(reduce_op::sum, n, id) != reference_bits<T>(reduce_op::sum, n, id, o)) ++differ;
      return static_cast<double>(differ) / static_cast<double>(ids);
    };
    for (int n = 3; n <= 8; ++n) {
      for (const order o : {order::reversed, order::last_first}) {
        const double f32 = fraction(float{}, n, o), b16 = fraction(bf16{}, n, o), f16 = fraction(fp16{}, n, o);
        CAPTURE(n, static_cast<int>(o), f32, b16, f16);
        REQUIRE(f32 >= 0.1);
        REQUIRE(b16 >= 0.1);
        REQUIRE(f16 >= 0.1);
      }
    }
  }
}

TEMPLATE_TEST_CASE("determinism: every rank's element i is the rank-order reference, at every size and offset, "
                   "for flat, tree and automatic",
                   "[dda][determinism]", float, bf16, fp16, std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  // Rank counts 2..8 are shared out between the test cases (runtime): 2, 3, 8 here; 4, 7 with the
  // grids; 6 with the launcher; 3, 5 fused; 2, 7 with the tile AllReduce. int32 sums are
  // associative (the order cannot show): fewer of them.
  const int n = std::is_same<T, std::int32_t>::value ? (sampled ? GENERATE(3) : GENERATE(3, 8))
                                                     : (sampled ? GENERATE(3, 8) : GENERATE(2, 3, 8));
  const auto& ws = windows();
  // Rank 0's sum of every window, for the direct comparison of overlapping ids below.
  std::vector<std::vector<T>> sums(ws.size());
  for (std::size_t k = 0; k < ws.size(); ++k) {
    const window w = ws[k];
    if (w.size == 100000 && (sampled || n == 2)) continue;  // the largest: N = 3 and 8, no sanitizer
    rcclx_test::shared_peers<T> peers(n, w.size);
    fill(peers, w);
    // min and max on one window (ties keep the earlier rank's value, e.g. the sign of a zero);
    // automatic (which runs flat or tree) on two.
    std::vector<reduce_op> ops{reduce_op::sum};
    if (k == 4) ops.insert(ops.end(), {reduce_op::min, reduce_op::max});
    for (const reduce_op op : ops) {
      const auto want = expected_bits<T>(op, n, w);
      for (const algorithm a : {algorithm::flat, algorithm::tree, algorithm::automatic}) {
        if (a == algorithm::automatic && (sampled || (k != 2 && k != 5) || op != reduce_op::sum ||
                                          !automatic_is_plain<T>(w.size, n)))
          continue;
        peers.allreduce(a, op);
        require_all_ranks(case_name<T>("emulated_peers", n, w, op, a), peers, want, w, op);
        if (op == reduce_op::sum) sums[k] = peers.output(0);
      }
    }
  }
  // The same logical element in different messages, at different offsets: the same bits. (It
  // follows from the above; checked directly too.)
  for (std::size_t a = 0; a < ws.size(); ++a) {
    for (std::size_t b = a + 1; b < ws.size(); ++b) {
      if (sums[a].empty() || sums[b].empty()) continue;
      const std::uint64_t lo = std::max(ws[a].base, ws[b].base);
      const std::uint64_t hi = std::min(ws[a].base + ws[a].size, ws[b].base + ws[b].size);
      CAPTURE(n, ws[a].size, ws[a].base, ws[b].size, ws[b].base);
      REQUIRE(lo < hi);
      REQUIRE(std::memcmp(sums[a].data() + (lo - ws[a].base), sums[b].data() + (lo - ws[b].base),
                          (hi - lo) * sizeof(T)) == 0);
    }
  }
}

TEMPLATE_TEST_CASE("determinism: blocks per rank, threads per block, the LL one-shot and in-place do not change "
                   "the bits",
                   "[dda][determinism]", float, bf16, fp16, std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = sampled || std::is_same<T, std::int32_t>::value ? GENERATE(7) : GENERATE(4, 7);
  // blocks_per_rank 0 is the launcher's choice; "max" (a huge request) is capped by emulated_peers
  // to what the pads and residency allow (4 on the host backend). On a GPU `threads` is the block
  // size (and the tile: 16 bytes per thread). On the host backend a block is one thread whatever
  // `threads` says: there emulated_options::threads only enters the launcher's choice of blocks
  // per rank (blocks_per_rank 0), as the tile size dda::num_blocks_for divides by.
  constexpr int max_blocks = 1 << 20;
  const std::vector<int> blocks{0, 1, 2, 3, max_blocks};
  const std::vector<int> threads{64, 128, 256, 512};
  // One message per grid, in turn: the flat AllReduce runs the barrier-free LL one-shot when every
  // block has one tile that fits its LL region (small messages; on the host backend the 7-element
  // one), else two barriers; ll {0, 0} (every third grid) forces the barrier protocol. Each element
  // type runs every other grid, so that the four types together cover the 20 grids twice
  // (ThreadSanitizer, compute-sanitizer: every fourth, all 20 once).
  const std::vector<window> ws{{7, 997}, {1000, 500}, {4096 + 3, 3}};
  const int type_index = std::is_same<T, float>::value ? 0 : std::is_same<T, bf16>::value ? 1
                         : std::is_same<T, fp16>::value ? 2 : 3;
  int grid = -1;
  for (const int b : blocks) {
    for (const int th : threads) {
      ++grid;
      if ((grid + type_index) % (sampled ? 4 : 2) != 0) continue;
      const window w = ws[static_cast<std::size_t>(grid) % ws.size()];
      const auto want = expected_bits<T>(reduce_op::sum, n, w);
      for (const bool ll : {true, false}) {
        if (!ll && grid % 3 != 0) continue;
        rt::emulated_options o;
        o.blocks_per_rank = b;
        o.threads = th;
        if (!ll) o.ll = rcclx::core::ll_layout{0, 0};
        o.in_place = (grid / 2) % 2 == 1;  // the output overwrites the input
        rcclx_test::shared_peers<T> peers(n, w.size, o);
        fill(peers, w);
        for (const algorithm a : {algorithm::flat, algorithm::tree}) {
          if (!ll && a == algorithm::tree) continue;  // the tree does not use the LL regions
          peers.allreduce(a, reduce_op::sum);
          const std::string what = case_name<T>("emulated_peers", n, w, reduce_op::sum, a) + ", blocks_per_rank " +
                                   std::to_string(b) + " (ran " + std::to_string(peers.last_blocks_per_rank()) +
                                   "), threads " + std::to_string(th) + (ll ? "" : ", LL off") +
                                   (o.in_place ? ", in place" : "");
          if (b > 0 && b != max_blocks) REQUIRE(peers.last_blocks_per_rank() == b);
          require_all_ranks(what, peers, want, w, reduce_op::sum);
        }
      }
    }
  }
  // Inputs in the symmetric buffers (no copy in the kernel), tree in place on them: same bits.
  const window w{4096 + 3, 3};
  rt::emulated_options o;
  o.input_in_symmetric_buffer = true;
  o.in_place = true;
  rcclx_test::shared_peers<T> peers(n, w.size, o);
  fill(peers, w);
  peers.allreduce(algorithm::tree, reduce_op::sum);
  require_all_ranks(case_name<T>("emulated_peers (input in the symmetric buffer, in place)", n, w, reduce_op::sum,
                                 algorithm::tree),
                    peers, expected_bits<T>(reduce_op::sum, n, w), w, reduce_op::sum);
}

TEMPLATE_TEST_CASE("determinism: the per-rank launcher dda::allreduce gives the same bits", "[dda][determinism]",
                   float, bf16, fp16, std::int32_t) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  if (!rcclx_test::concurrent_kernels_possible()) {
    WARN("kernels are serialised under compute-sanitizer: per-rank launches cannot meet; skipped");
    return;
  }
  const int n = GENERATE(6);
  for (const window w : {window{33, 990}, window{4096 + 3, 3}}) {
    if (sampled && w.size == 33) continue;
    rcclx::testing::emulated_world<max_r> world(n, w.size * sizeof(T), 32);
    device_arrays<T> in(n, w.size), out(n, w.size);
    for (int r = 0; r < n; ++r) {
      std::vector<T> v(w.size);
      for (std::size_t i = 0; i < w.size; ++i) v[i] = input_value<T>(r, w.base + i);
      rcclx::gpu::copy(in[r], v.data(), w.size * sizeof(T));
    }
    const std::vector<unsigned char> poison(w.size * sizeof(T), 0x5A);
    rcclx_test::rank_runner runner(n);
    int call = 0;
    for (const reduce_op op : {reduce_op::sum, reduce_op::max}) {
      const auto want = expected_bits<T>(op, n, w);
      for (const algorithm a : {algorithm::flat, algorithm::tree, algorithm::automatic}) {
        // threads 0 (the default) or 128 (a GPU block size; ignored by the host backend); the
        // table by value or in device memory, alternately.
        const int threads = call % 2 ? 128 : 0;
        const bool device_table = (call / 2) % 2 == 1;
        ++call;
        const int blocks = rcclx_test::launcher_blocks_per_rank();
        for (int r = 0; r < n; ++r) rcclx::gpu::copy(out[r], poison.data(), poison.size());  // unwritten = wrong
        runner.run([&](int r, rcclx::gpu::stream_t s) {
          if (device_table)
            rcclx::dda::allreduce(world.device_tables<T>() + r, n, in[r], out[r], w.size, op, a, s, blocks, threads);
          else
            rcclx::dda::allreduce(world.table<T>(r), in[r], out[r], w.size, op, a, s, blocks, threads);
        });
        world.throw_if_error();
        for (int r = 0; r < n; ++r) {
          std::vector<T> got(w.size);
          rcclx::gpu::copy(got.data(), out[r], w.size * sizeof(T));
          require_reference(case_name<T>("dda::allreduce launcher", n, w, op, a) + ", threads " +
                                std::to_string(threads) + (device_table ? ", device table" : ""),
                            got.data(), want, w, op, n, r);
        }
      }
    }
  }
}

namespace {

// ---- fused: AllReduce + residual + RMSNorm -----------------------------------------------------------

constexpr int barrier_blocks = 8;  // pad slots before the tile slots (as a real job leaves to dda)
constexpr std::uint64_t residual_rank = 1000;  // the residual's "rank" in input_bits (the same on every rank)

template <class T>
struct rmsnorm_world {
  int n;
  std::size_t tokens, hidden;
  window w;  // x[row][col] of rank r is input(r, w.base + row * hidden + col)
  fz::tile_slots slots;
  rt::emulated_world<max_r> world;
  std::vector<T*> x, res, out;
  T* weight;
  std::vector<T> residual_host;
  std::vector<void*> owned;

  rmsnorm_world(int num_ranks, std::size_t tokens_, std::size_t hidden_, std::uint64_t base)
      : n(num_ranks), tokens(tokens_), hidden(hidden_), w{tokens_ * hidden_, base},
        slots{barrier_blocks, static_cast<int>(tokens_)},
        world(num_ranks, fz::allreduce_rmsnorm_workspace_bytes<T>(tokens_, hidden_, algorithm::tree),
              fz::pad_blocks_for(barrier_blocks, static_cast<int>(tokens_))),
        residual_host(w.size) {
    for (std::size_t i = 0; i < w.size; ++i)
      residual_host[i] = input_value<T>(static_cast<int>(residual_rank), w.base + i);
    for (int r = 0; r < n; ++r) {
      std::vector<T> v(w.size);
      for (std::size_t i = 0; i < w.size; ++i) v[i] = input_value<T>(r, w.base + i);
      x.push_back(alloc(w.size));
      rcclx::gpu::copy(x.back(), v.data(), w.size * sizeof(T));
      res.push_back(alloc(w.size));
      out.push_back(alloc(w.size));
    }
    std::vector<T> wt(hidden);
    for (std::size_t j = 0; j < hidden; ++j) wt[j] = T(0.75f + 0.0625f * static_cast<float>(j % 9));
    weight = alloc(hidden);
    rcclx::gpu::copy(weight, wt.data(), hidden * sizeof(T));
  }
  ~rmsnorm_world() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }
  T* alloc(std::size_t count) {
    owned.push_back(rcclx::gpu::device_malloc(count * sizeof(T)));
    return static_cast<T*>(owned.back());
  }
  // Every rank's residual reset to the original (the call overwrites it with the new one), and its
  // output poisoned (an element a call leaves unwritten cannot pass for the last call's).
  void reset_residuals() {
    const std::vector<unsigned char> poison(w.size * sizeof(T), 0x5A);
    for (int r = 0; r < n; ++r) {
      rcclx::gpu::copy(res[r], residual_host.data(), w.size * sizeof(T));
      rcclx::gpu::copy(out[r], poison.data(), poison.size());
    }
  }
  fz::rmsnorm_args<T> args(int r) const { return {x[r], res[r], weight, out[r], tokens, hidden, 1e-5f}; }
  std::vector<T> download(const T* p) const {
    std::vector<T> v(w.size);
    rcclx::gpu::copy(v.data(), p, w.size * sizeof(T));
    return v;
  }
};

// The new residual the contract gives: T(float(S) + float(residual)), S the AllReduce's bits (here:
// the test's reference), the add in FP32, one rounding (docs/fusion.md, section 8).
template <class T>
std::vector<std::uint32_t> expected_residual(const rmsnorm_world<T>& fw, const std::vector<std::uint32_t>& sum) {
  std::vector<std::uint32_t> e(sum.size());
  for (std::size_t i = 0; i < sum.size(); ++i)
    e[i] = narrow<T>(widen<T>(sum[i]) + widen<T>(bits_of(fw.residual_host[i])));
  return e;
}

}  // namespace

TEMPLATE_TEST_CASE("determinism: AllReduce + residual + RMSNorm's new residual is T(rank-order sum + residual)",
                   "[dda][determinism][fused]", float, bf16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = sampled ? GENERATE(3) : GENERATE(3, 5);
  struct shape {
    std::size_t tokens, hidden;
    std::uint64_t base;
  };
  // Row lengths that are odd multiples of the vector width; the same logical ids in rows of
  // different lengths and at different row offsets (id 1000+ in each).
  for (const shape sh : {shape{1, 1032, 1000}, shape{3, 264, 800}, shape{17, 136, 3}}) {
    if (sampled && sh.tokens == 3) continue;
    rmsnorm_world<T> fw(n, sh.tokens, sh.hidden, sh.base);
    const window w = fw.w;
    const auto sum = expected_bits<T>(reduce_op::sum, n, w);
    const auto want = expected_residual(fw, sum);
    // The plain AllReduce of the same elements, for the direct comparison (checked against the
    // reference at the end).
    rcclx_test::shared_peers<T> plain(n, w.size);
    fill(plain, w);
    plain.allreduce(algorithm::flat);
    std::vector<std::vector<unsigned char>> first_out;  // the RMSNorm output of the first run, every rank
    const auto check = [&](const std::string& what) {
      for (int r = 0; r < n; ++r) {
        const auto nr = fw.download(fw.res[r]);
        require_reference(what + ", new residual", nr.data(), want, w, reduce_op::sum, n, r);
        // The new residual is also exactly T(plain AllReduce + residual).
        for (std::size_t i = 0; i < w.size; ++i) {
          const std::uint32_t direct =
              narrow<T>(widen<T>(bits_of(plain.output(r)[i])) + widen<T>(bits_of(fw.residual_host[i])));
          if (direct != bits_of(nr[i])) {
            INFO(what << ": rank " << r << " element " << i << ": new residual " << hex(bits_of(nr[i]), sizeof(T))
                      << " but T(plain AllReduce + residual) = " << hex(direct, sizeof(T)));
            REQUIRE(direct == bits_of(nr[i]));
          }
        }
        // The RMSNorm output (a function of the whole row) is the same on every rank and every path.
        const auto o = fw.download(fw.out[r]);
        std::vector<unsigned char> ob(w.size * sizeof(T));
        std::memcpy(ob.data(), o.data(), ob.size());
        if (first_out.size() < static_cast<std::size_t>(n)) first_out.push_back(ob);
        INFO(what << ": rank " << r << ": the RMSNorm output differs from the first run's");
        REQUIRE(ob == first_out[static_cast<std::size_t>(r)]);
        REQUIRE(ob == first_out[0]);
      }
    };
    // The emulated launch (every rank in one launch): flat and tree, the launcher's grid (on a CUDA
    // sm_90+ GPU, flat with the default grid may be the cluster kernel) and explicit block counts.
    for (const algorithm a : {algorithm::flat, algorithm::tree}) {
      for (const int blocks : {0, 1, 3}) {
        if (blocks == 1 && (sampled || a == algorithm::flat)) continue;
        fw.reset_residuals();
        std::vector<fz::rmsnorm_args<T>> args;
        for (int r = 0; r < n; ++r) args.push_back(fw.args(r));
        const int used = rt::launch_allreduce_rmsnorm<T, T, max_r>(fw.world, args.data(), fw.slots, a, blocks);
        rcclx::gpu::device_synchronize();
        fw.world.throw_if_error();
        check(case_name<T>("fused allreduce_rmsnorm (emulated)", n, w, reduce_op::sum, a) + ", tokens " +
              std::to_string(sh.tokens) + " x hidden " + std::to_string(sh.hidden) + ", blocks_per_rank " +
              std::to_string(blocks) + " (ran " + std::to_string(used) + ")");
      }
    }
    // The per-rank launcher, algorithm::automatic (the DDA table's choice), as separate processes call it.
    if (rcclx_test::concurrent_kernels_possible()) {
      fw.reset_residuals();
      rcclx_test::rank_runner runner(n);
      runner.run([&](int r, rcclx::gpu::stream_t s) {
        fz::allreduce_rmsnorm(fw.world.template table<T>(r), fw.args(r), fw.slots, algorithm::automatic, s,
                              rcclx_test::launcher_blocks_per_rank());
      });
      fw.world.throw_if_error();
      check(case_name<T>("fused::allreduce_rmsnorm launcher", n, w, reduce_op::sum, algorithm::automatic) +
            ", tokens " + std::to_string(sh.tokens) + " x hidden " + std::to_string(sh.hidden));
    }
    require_all_ranks(case_name<T>("plain (the fused case's elements)", n, w, reduce_op::sum, algorithm::flat), plain,
                      sum, w, reduce_op::sum);
  }
}

namespace {

// ---- fused: the tile-level AllReduce -----------------------------------------------------------------

constexpr int tile_threads = on_host ? 1 : 256;

// Every block of every rank: writes its tiles of a rows x cols output (element (row, col) of rank r
// = input(r, base + row * cols + col); padding of edge tiles: zeros, never read), publishes them,
// reduces them (PeersInFlight < 8 takes the batched loop instead of dda's reduce_vec) and stores
// the values its epilogue receives.
template <class T, algorithm Algo, int VPT, int PeersInFlight, class Op>
struct tile_kernel {
  static constexpr int max_threads_per_block = tile_threads;
  const rcclx::core::peer_table<T, max_r>* tables;
  T* out[max_r];
  fz::tile_slots slots;
  fz::tile_map map;
  std::uint64_t base;

  template <class G>
  RCCLX_HOST_DEVICE void operator()(const G& g, rt::launch_index ix) const {
    const int tiles = static_cast<int>(map.num_tiles());
    fz::tile_allreduce<T, max_r, Algo, Op> ar(tables[ix.rank], slots, map.tile_elems(), tiles);
    for (int t = ix.block; t < tiles; t += ix.num_blocks) {
      T* in = ar.input(t);
      for (std::size_t e = static_cast<std::size_t>(g.thread_rank()); e < map.tile_elems();
           e += static_cast<std::size_t>(g.size())) {
        const fz::position p = map.at(static_cast<std::size_t>(t), e);
        in[e] = map.contains(p) ? input_value<T>(ix.rank, base + p.row * map.cols + p.col) : from_bits<T>(0);
      }
      ar.publish(g, t);
    }
    const fz::epilogue<fz::store<T>> epi{{out[ix.rank], map.cols}};
    for (int t = ix.block; t < tiles; t += ix.num_blocks)
      if (!ar.template reduce<VPT, PeersInFlight>(g, t, map, epi)) break;
    ar.finish(g, ix.num_blocks);
  }
};

template <class T>
struct tile_world {
  int n;
  fz::tile_slots slots;
  rt::emulated_world<max_r> world;
  std::vector<T*> out;
  std::size_t max_out;
  std::vector<void*> owned;

  tile_world(int num_ranks, std::size_t max_tile_elems, int max_tiles, std::size_t max_outputs)
      : n(num_ranks), slots{5, max_tiles},
        world(num_ranks, fz::tile_allreduce<T, max_r, algorithm::tree>::workspace_bytes(max_tile_elems, max_tiles),
              slots.end()),
        max_out(max_outputs) {
    for (int r = 0; r < n; ++r) {
      owned.push_back(rcclx::gpu::device_malloc(max_out * sizeof(T)));
      out.push_back(static_cast<T*>(owned.back()));
    }
  }
  ~tile_world() {
    for (void* p : owned) rcclx::gpu::device_free(p);
  }

  template <algorithm Algo, int VPT, int PeersInFlight, class Op>
  std::vector<std::vector<T>> run(const fz::tile_map& map, std::uint64_t base, int blocks) {
    const std::size_t count = map.rows * map.cols;
    const std::vector<unsigned char> poison(count * sizeof(T), 0x5A);
    tile_kernel<T, Algo, VPT, PeersInFlight, Op> k{};
    k.tables = world.template device_tables<T>();
    for (int r = 0; r < n; ++r) {
      rcclx::gpu::copy(out[r], poison.data(), poison.size());
      k.out[r] = out[r];
    }
    k.slots = slots;
    k.map = map;
    k.base = base;
    rt::launch_emulated(n, blocks, tile_threads, k);
    rcclx::gpu::device_synchronize();
    world.throw_if_error();
    std::vector<std::vector<T>> o(n, std::vector<T>(count));
    for (int r = 0; r < n; ++r) rcclx::gpu::copy(o[r].data(), out[r], count * sizeof(T));
    return o;
  }
};

}  // namespace

TEMPLATE_TEST_CASE("determinism: the tile-level AllReduce hands its epilogue the plain AllReduce's bits",
                   "[dda][determinism][fused]", float, bf16, fp16) {
  RCCLX_REQUIRE_DEVICE_OR_SKIP();
  using T = TestType;
  const int n = sampled ? GENERATE(7) : GENERATE(2, 7);
  struct tcase {
    fz::tile_map map;
    std::uint64_t base;
  };
  // Edges sticking out; one tile; tiles of one vector row. Logical ids overlap the windows above.
  const std::vector<tcase> cases{{fz::tile_map{17, 40, 8, 16}, 990}, {fz::tile_map{5, 24, 4, 8}, 997},
                                 {fz::tile_map{64, 64, 64, 64}, 3}, {fz::tile_map{33, 8, 1, 8}, 500}};
  tile_world<T> tw(n, 64 * 64, 40, 64 * 64);
  for (const tcase& c : cases) {
    if (sampled && c.map.rows == 64) continue;
    const window w{c.map.rows * c.map.cols, c.base};
    for (const reduce_op op : {reduce_op::sum, reduce_op::max}) {
      if (op == reduce_op::max && c.base != 990) continue;
      const auto want = expected_bits<T>(op, n, w);
      rcclx_test::shared_peers<T> plain(n, w.size);
      fill(plain, w);
      plain.allreduce(algorithm::tree, op);
      const auto name = [&](const char* v, int blocks) {
        return case_name<T>("tile_allreduce", n, w, op, std::string(v)) + ", tile map " +
               std::to_string(c.map.rows) + "x" + std::to_string(c.map.cols) + " in " +
               std::to_string(c.map.tile_rows) + "x" + std::to_string(c.map.tile_cols) + ", blocks " +
               std::to_string(blocks);
      };
      for (const int blocks : {1, 3}) {
        std::vector<std::pair<const char*, std::vector<std::vector<T>>>> runs;
        // Blocks 3: flat and tree with every peer's loads at once (dda's reduce_vec); blocks 1: the
        // batched loop (PeersInFlight < 8), more vectors per thread.
        if (op == reduce_op::max) {
          if (blocks == 1) continue;
          runs.emplace_back("flat", tw.template run<algorithm::flat, 1, 8, rcclx::core::op_max>(c.map, c.base, blocks));
          runs.emplace_back("tree", tw.template run<algorithm::tree, 1, 8, rcclx::core::op_max>(c.map, c.base, blocks));
        } else if (blocks == 3) {
          runs.emplace_back("flat", tw.template run<algorithm::flat, 1, 8, rcclx::core::op_sum>(c.map, c.base, blocks));
          runs.emplace_back("tree", tw.template run<algorithm::tree, 1, 8, rcclx::core::op_sum>(c.map, c.base, blocks));
        } else {
          runs.emplace_back("flat, 4 vectors per thread, 2 peers in flight",
                            tw.template run<algorithm::flat, 4, 2, rcclx::core::op_sum>(c.map, c.base, blocks));
          runs.emplace_back("tree, 3 peers in flight",
                            tw.template run<algorithm::tree, 1, 3, rcclx::core::op_sum>(c.map, c.base, blocks));
        }
        for (const auto& run : runs) {
          for (int r = 0; r < n; ++r) {
            require_reference(name(run.first, blocks), run.second[r].data(), want, w, op, n, r);
            INFO(name(run.first, blocks) << ": rank " << r << " differs from the plain AllReduce's bits");
            REQUIRE(std::memcmp(run.second[r].data(), plain.output(r).data(), w.size * sizeof(T)) == 0);
          }
        }
      }
    }
  }
}
