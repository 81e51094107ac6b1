// rcclx/core/ops.hpp: what a collective reduces with (rcclx::reduce_op) and how (rcclx::algorithm),
// the element-wise op functors, and value_traits: how each element type is widened for accumulation.
//
//   rcclx::core::op_max op;
//   float m = op(1.0f, NAN);                                  // NaN: min/max propagate NaN
//   using tr = rcclx::core::value_traits<rcclx::bf16>;        // acc_type = float
//   tr::acc_type a = tr::load(x);  rcclx::bf16 y = tr::store(a);
//
// Accumulation: float, bf16 and fp16 accumulate in fp32 (RCCLX DDA and QuickReduce accumulate in
// the input type, which loses ~log2(N) bits at N ranks); int32 accumulates in int32, and its sum
// wraps modulo 2^32 (two's complement, as NCCL/RCCL). min and max are exact for every type.
//
// product, avg and premul_sum (torch's PRODUCT, AVG and PREMUL_SUM) are reduced by kernels of their
// own (dda/op_allreduce.hpp: AllReduce and ReduceScatter, flat and tree); the other collectives and
// rcclx::lpc take sum, min and max only (is_basic) and refuse the others with errc::unsupported.
//   product: rank-order products in fp32 (int32: modulo 2^32);
//   avg: the rank-order sum, then one division by N of the fp32 sum before the single rounding to
//        T; int32: the wrapped sum divided by N, truncated toward zero (as NCCL's ncclAvg for
//        integers, i.e. torch's AVG on NCCL);
//   premul_sum: sum over ranks of (factor * x_p), each product in fp32 before the rank-order fp32
//        sum (reduce_spec carries the factor; the same factor on every rank). Floating types only.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "../gpu/convert.hpp"
#include "../gpu/memory.hpp"
#include "types.hpp"

RCCLX_NAMESPACE_BEGIN

// The reduction a collective applies element-wise across ranks.
enum class reduce_op {
  sum,  // fp32 accumulation for floating types; int32 wraps modulo 2^32
  min,  // NaN propagates; ties (including -0 and +0) keep the lower rank's value
  max,  // NaN propagates; ties (including -0 and +0) keep the lower rank's value
  product,     // fp32 products for floating types; int32 wraps modulo 2^32
  avg,         // sum, then divided by N once (fp32 for floating types; int32: truncated toward zero)
  premul_sum,  // sum of factor * x (factor: reduce_spec::factor); floating types only
};

// An op with its run-time parameter: the factor of reduce_op::premul_sum (ignored by the others).
// Implicit from a reduce_op, so every API that takes one takes a plain op too.
// The factor is applied in the element type's accumulator precision: fp32 (rounded to float) for
// float, bf16 and fp16, fp64 for double. factor_device, when not null, is the factor in device
// memory instead: one element of the collective's type T (torch's tensor factor, NCCL's
// ncclScalarDevice), read by the kernel when it runs (so a captured graph reads its current value),
// widened like an input element; `factor` is then not used.
struct reduce_spec {
  reduce_op op = reduce_op::sum;
  double factor = 1.0;
  const void* factor_device = nullptr;
  constexpr reduce_spec() = default;
  constexpr reduce_spec(reduce_op o, double f = 1.0, const void* f_device = nullptr)  // NOLINT: implicit on purpose
      : op(o), factor(f), factor_device(f_device) {}
};

// How an AllReduce moves data. automatic picks flat or tree from the size, the rank count and the
// GPU architecture (dda/select.hpp); it never picks low_precision.
enum class algorithm {
  flat,           // one-shot: every rank reads every peer's whole buffer (small messages)
  tree,           // two-shot: reduce-scatter then all-gather, both by direct loads (large messages)
  low_precision,  // FP8 wire format (the LPC collectives); not implemented by dda
  automatic,      // flat or tree, from the tuning table
  default_algorithm = automatic,
};

inline const char* to_string(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    case reduce_op::product: return "product";
    case reduce_op::avg: return "avg";
    case reduce_op::premul_sum: return "premul_sum";
  }
  return "invalid";
}

inline const char* to_string(algorithm a) {
  switch (a) {
    case algorithm::flat: return "flat";
    case algorithm::tree: return "tree";
    case algorithm::low_precision: return "low_precision";
    case algorithm::automatic: return "automatic";
  }
  return "invalid";
}

// A value of the enum.
inline bool is_valid(reduce_op op) {
  return op == reduce_op::sum || op == reduce_op::min || op == reduce_op::max || op == reduce_op::product ||
         op == reduce_op::avg || op == reduce_op::premul_sum;
}
// sum, min or max: the ops every reducing collective takes (the others: dda/op_allreduce.hpp).
inline bool is_basic(reduce_op op) { return op == reduce_op::sum || op == reduce_op::min || op == reduce_op::max; }
inline bool is_valid(algorithm a) {
  return a == algorithm::flat || a == algorithm::tree || a == algorithm::low_precision ||
         a == algorithm::automatic;
}

namespace core {

// ---- op functors: combine two accumulators, `a` from the lower rank ------------------------------
// Always applied in rank order 0, 1, ..., N-1 (acc = x0; acc = op(acc, x1); ...), so every rank and
// every algorithm produces the same bits.

struct op_sum {
  static constexpr reduce_op value = reduce_op::sum;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float operator()(float a, float b) const { return a + b; }
  // Wraps modulo 2^32 (computed unsigned: signed overflow would be undefined behaviour).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::int32_t operator()(std::int32_t a, std::int32_t b) const {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) + static_cast<std::uint32_t>(b));
  }
  // double accumulates in double; int64 wraps modulo 2^64.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE double operator()(double a, double b) const { return a + b; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::int64_t operator()(std::int64_t a, std::int64_t b) const {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
  }
};

// min and max propagate NaN (like torch.minimum / torch.maximum, unlike fminf / fmaxf, which
// would silently drop a NaN produced on one rank). A tie keeps `a`, the lower rank's value, so
// min(-0, +0) is the sign of the lower rank: deterministic, the same on every rank.
struct op_min {
  static constexpr reduce_op value = reduce_op::min;
  template <class A>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE A operator()(A a, A b) const {
    return (b < a || b != b) ? b : a;  // b != b: b is NaN (a NaN `a` is kept: b < NaN is false)
  }
};

struct op_max {
  static constexpr reduce_op value = reduce_op::max;
  template <class A>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE A operator()(A a, A b) const {
    return (a < b || b != b) ? b : a;
  }
};

// ---- the ops with kernels of their own (dda/op_allreduce.hpp) ------------------------------------
// Besides the pairwise step, such an op may have pre(x) (applied to every rank's widened value
// before it is folded, rank 0's included) and finish(acc, n) (applied once to the folded value of
// n ranks before it is narrowed to T); op_steps says which.

template <class T>
struct value_traits;  // (below)

struct op_product {
  static constexpr reduce_op value = reduce_op::product;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float operator()(float a, float b) const { return a * b; }
  // Wraps modulo 2^32 (computed unsigned).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::int32_t operator()(std::int32_t a, std::int32_t b) const {
    return static_cast<std::int32_t>(static_cast<std::uint32_t>(a) * static_cast<std::uint32_t>(b));
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE double operator()(double a, double b) const { return a * b; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::int64_t operator()(std::int64_t a, std::int64_t b) const {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
  }
};

struct op_avg : op_sum {
  static constexpr reduce_op value = reduce_op::avg;
  using op_sum::operator();
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float finish(float acc, int n) const { return acc / static_cast<float>(n); }
  // Truncated toward zero (C++ division), as NCCL's ncclAvg for integers.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::int32_t finish(std::int32_t acc, int n) const { return acc / n; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE double finish(double acc, int n) const { return acc / static_cast<double>(n); }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::int64_t finish(std::int64_t acc, int n) const { return acc / n; }
};

struct op_premul_sum : op_sum {
  static constexpr reduce_op value = reduce_op::premul_sum;
  float factor;     // the factor for fp32 accumulators
  double factor64;  // and for double
  const void* factor_device = nullptr;  // one T in device memory: read by with_device_factor<T>
  using op_sum::operator();
  // The op with its factor read from factor_device (one element of T, widened), when that is set.
  template <class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE op_premul_sum with_device_factor() const {
    op_premul_sum o = *this;
    if (factor_device) {
      const auto f = value_traits<T>::load(*static_cast<const T*>(factor_device));
      o.factor = static_cast<float>(f);
      o.factor64 = static_cast<double>(f);
    }
    return o;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float pre(float x) const { return gpu::mul_rn(x, factor); }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE double pre(double x) const { return gpu::mul_rn(x, factor64); }
};

namespace detail {
template <class Op, class = void>
struct has_pre : std::false_type {};
template <class Op>
struct has_pre<Op, decltype((void)std::declval<const Op&>().pre(0.0f))> : std::true_type {};
template <class Op, class = void>
struct has_finish : std::false_type {};
template <class Op>
struct has_finish<Op, decltype((void)std::declval<const Op&>().finish(0.0f, 1))> : std::true_type {};
}  // namespace detail

// The optional steps of an op: pre and finish (identity for the ops that have none).
template <class Op>
struct op_steps {
  static constexpr bool pre = detail::has_pre<Op>::value;
  static constexpr bool finish = detail::has_finish<Op>::value;
};

// Calls f(op_product{}), f(op_avg{}) or f(op_premul_sum{factor}) for a spec that is not is_basic
// (the caller validates it first).
template <class F>
inline decltype(auto) with_extended_op(const reduce_spec& spec, F&& f) {
  switch (spec.op) {
    case reduce_op::product: return f(op_product{});
    case reduce_op::avg: return f(op_avg{});
    case reduce_op::premul_sum:
    default: return f(op_premul_sum{{}, static_cast<float>(spec.factor), spec.factor, spec.factor_device});
  }
}

// The functor of a reduce_op known at compile time.
template <reduce_op Op>
struct op_of;
template <>
struct op_of<reduce_op::sum> {
  using type = op_sum;
};
template <>
struct op_of<reduce_op::min> {
  using type = op_min;
};
template <>
struct op_of<reduce_op::max> {
  using type = op_max;
};
template <reduce_op Op>
using op_of_t = typename op_of<Op>::type;

// Calls f(op_sum{}), f(op_min{}) or f(op_max{}): turns a run-time reduce_op into a template
// argument (one kernel instantiation per op). The caller validates `op` first.
template <class F>
inline decltype(auto) with_op(reduce_op op, F&& f) {
  switch (op) {
    case reduce_op::min: return f(op_min{});
    case reduce_op::max: return f(op_max{});
    case reduce_op::sum:
    default: return f(op_sum{});
  }
}

// ---- value_traits: element type <-> accumulator -------------------------------------------------
// load widens one element, store narrows (round to nearest even); unpack/pack do the same for the
// elems_per_vec16<T> elements of one 16-byte vector, with the element at the lowest address first.

template <class T>
struct value_traits {
  static constexpr bool supported = false;  // not an rcclx reduction type
};

namespace detail {
// A 32-bit type accumulated as itself: each word of a vector is one element, Word converts it.
template <class T, class Word>
struct word_traits {
  static constexpr bool supported = true;
  using acc_type = T;
  static constexpr int vec_elems = 4;
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE acc_type load(T x) { return x; }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE T store(acc_type a) { return a; }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void unpack(const gpu::vec16& v, acc_type (&out)[4]) {
    for (int i = 0; i < 4; ++i) out[i] = Word::from_word(v.w[i]);
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE gpu::vec16 pack(const acc_type (&in)[4]) {
    gpu::vec16 v;
    for (int i = 0; i < 4; ++i) v.w[i] = Word::to_word(in[i]);
    return v;
  }
};

struct float_word {
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float from_word(std::uint32_t w) { return rcclx::detail::bits_float(w); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint32_t to_word(float x) { return rcclx::detail::float_bits(x); }
};
struct int32_word {
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::int32_t from_word(std::uint32_t w) { return static_cast<std::int32_t>(w); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint32_t to_word(std::int32_t x) { return static_cast<std::uint32_t>(x); }
};

// A 16-bit float accumulated in fp32: two elements per word, the lower one in the low half. Half
// widens an element or the low or high half of a word, and narrows a float to an element or bits.
template <class T, class Half>
struct half_traits {
  static constexpr bool supported = true;
  using acc_type = float;
  static constexpr int vec_elems = 8;
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE acc_type load(T x) { return Half::load(x); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE T store(acc_type a) { return Half::store(a); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void unpack(const gpu::vec16& v, acc_type (&out)[8]) {
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = Half::low(v.w[i]);
      out[2 * i + 1] = Half::high(v.w[i]);
    }
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE gpu::vec16 pack(const acc_type (&in)[8]) {
    gpu::vec16 v;
    for (int i = 0; i < 4; ++i) {
      v.w[i] = static_cast<std::uint32_t>(Half::narrow(in[2 * i])) |
               (static_cast<std::uint32_t>(Half::narrow(in[2 * i + 1])) << 16);
    }
    return v;
  }
};

// A bf16 is the top half of a float: widening is a shift (low half) or a mask (high half).
struct bf16_half {
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float load(bf16 x) { return static_cast<float>(x); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE bf16 store(float a) { return bf16(a); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float low(std::uint32_t w) { return rcclx::detail::bits_float(w << 16); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float high(std::uint32_t w) {
    return rcclx::detail::bits_float(w & 0xFFFF0000u);
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint16_t narrow(float a) { return bf16::from_float(a); }
};

// fp16 <-> fp32: the hardware converters on GPUs, the bit-exact software codec on the host
// (gpu/convert.hpp). They agree on every non-NaN value; a NaN stays a NaN (its payload may differ).
struct fp16_half {
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float load(fp16 x) { return gpu::half_bits_to_float(x.bits); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE fp16 store(float a) { return fp16::from_bits(gpu::float_to_half_bits(a)); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float low(std::uint32_t w) {
    return gpu::half_bits_to_float(static_cast<std::uint16_t>(w & 0xFFFFu));
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float high(std::uint32_t w) {
    return gpu::half_bits_to_float(static_cast<std::uint16_t>(w >> 16));
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint16_t narrow(float a) { return gpu::float_to_half_bits(a); }
};
}  // namespace detail

template <>
struct value_traits<float> : detail::word_traits<float, detail::float_word> {
  static const char* name() { return "float"; }
};
template <>
struct value_traits<std::int32_t> : detail::word_traits<std::int32_t, detail::int32_word> {
  static const char* name() { return "int32"; }
};
template <>
struct value_traits<bf16> : detail::half_traits<bf16, detail::bf16_half> {
  static const char* name() { return "bf16"; }
};
template <>
struct value_traits<fp16> : detail::half_traits<fp16, detail::fp16_half> {
  static const char* name() { return "fp16"; }
};

namespace detail {
// An element type other than a 32-bit word or a 16-bit float: the 16 / sizeof(T) elements of a vector
// one by one (the lowest address first), each widened to Acc. int8 and uint8 accumulate in int32 (a
// sum of at most max_ranks values fits; sums and products are exact modulo 2^8 when narrowed), int64
// in int64 (wrapping), double in double.
template <class T, class Acc>
struct scalar_traits {
  static constexpr bool supported = true;
  using acc_type = Acc;
  static constexpr int vec_elems = static_cast<int>(16 / sizeof(T));
  // Narrowing an integer keeps its low bits (two's complement, as every supported compiler does).
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE acc_type load(T x) { return static_cast<Acc>(x); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE T store(acc_type a) { return static_cast<T>(a); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void unpack(const gpu::vec16& v, acc_type (&out)[vec_elems]) {
    T e[vec_elems];
    __builtin_memcpy(e, &v, 16);
    for (int i = 0; i < vec_elems; ++i) out[i] = load(e[i]);
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE gpu::vec16 pack(const acc_type (&in)[vec_elems]) {
    T e[vec_elems];
    for (int i = 0; i < vec_elems; ++i) e[i] = store(in[i]);
    gpu::vec16 v;
    __builtin_memcpy(&v, e, 16);
    return v;
  }
};

// bool: each byte is true when not 0 (accumulated as 0 / 1 in int32), stored as 0 / 1. Its ops are
// min (and) and max (or); effective_op maps sum to or and product to and, as torch does.
struct bool_traits {
  static constexpr bool supported = true;
  using acc_type = std::int32_t;
  static constexpr int vec_elems = 16;
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE acc_type load(bool x) { return x ? 1 : 0; }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE bool store(acc_type a) { return a != 0; }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE void unpack(const gpu::vec16& v, acc_type (&out)[16]) {
    unsigned char e[16];
    __builtin_memcpy(e, &v, 16);
    for (int i = 0; i < 16; ++i) out[i] = e[i] != 0 ? 1 : 0;
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE gpu::vec16 pack(const acc_type (&in)[16]) {
    unsigned char e[16];
    for (int i = 0; i < 16; ++i) e[i] = in[i] != 0 ? 1 : 0;
    gpu::vec16 v;
    __builtin_memcpy(&v, e, 16);
    return v;
  }
};
}  // namespace detail

template <>
struct value_traits<std::int8_t> : detail::scalar_traits<std::int8_t, std::int32_t> {
  static const char* name() { return "int8"; }
};
template <>
struct value_traits<std::uint8_t> : detail::scalar_traits<std::uint8_t, std::int32_t> {
  static const char* name() { return "uint8"; }
};
template <>
struct value_traits<std::int64_t> : detail::scalar_traits<std::int64_t, std::int64_t> {
  static const char* name() { return "int64"; }
};
template <>
struct value_traits<double> : detail::scalar_traits<double, double> {
  static const char* name() { return "float64"; }
};
template <>
struct value_traits<bool> : detail::bool_traits {
  static const char* name() { return "bool"; }
};

// Which ops an element type takes: float, bf16, fp16, double: all; int32, int64: all but premul_sum
// (avg truncates toward zero); int8, uint8: sum, min, max, product (modulo 2^8); bool: sum (or),
// min (and), max (or), product (and).
template <class T>
RCCLX_HOST_DEVICE constexpr bool takes_op(reduce_op op) {
  if constexpr (std::is_same<T, bool>::value || std::is_same<T, std::int8_t>::value ||
                std::is_same<T, std::uint8_t>::value)
    return op == reduce_op::sum || op == reduce_op::min || op == reduce_op::max || op == reduce_op::product;
  else if constexpr (std::is_integral<T>::value)
    return op != reduce_op::premul_sum;
  else
    return true;
}

// The op a reduction of T runs: bool's sum is or (max) and its product and (min), as torch maps
// them; every other type runs the op itself.
template <class T>
RCCLX_HOST_DEVICE constexpr reduce_op effective_op(reduce_op op) {
  if constexpr (std::is_same<T, bool>::value)
    return op == reduce_op::sum ? reduce_op::max : op == reduce_op::product ? reduce_op::min : op;
  else
    return op;
}

// True for the element types rcclx collectives reduce: float, rcclx::bf16, rcclx::fp16, int32_t,
// and double, int64_t, int8_t, uint8_t, bool (takes_op says with which ops).
template <class T>
inline constexpr bool is_reducible_v = value_traits<T>::supported;

// Name of a type for messages ("float", "bf16", ...; "unsupported type" otherwise).
template <class T>
inline const char* type_name() {
  if constexpr (is_reducible_v<T>) return value_traits<T>::name();
  else return "unsupported type";
}

}  // namespace core
RCCLX_NAMESPACE_END
