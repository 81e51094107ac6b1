// rcclx/fused/combine_ops.hpp: the built-in combines of fused::combine: lse_merge (attention
// partial outputs), argmax, topk<K> and softmax_stats (vocabulary-parallel sampling).
//
//   namespace fz = rcclx::fused;
//   using merge = fz::lse_merge<rcclx::bf16, 128>;          // one record per (token, head)
//   fz::combine<merge::record, merge, 8> c(table, slots, heads_per_tile, tokens * heads);
//   ...                                                      // write c.input(t), c.publish(g, t)
//   c.reduce(g, t, [&](std::size_t i, const merge::record& r) { store(out + i * 128, r.o); });
//   // or a thread per 16-byte slice of a head (16 per bf16 head of 128), the same bits:
//   c.reduce_slices(g, t, [&](std::size_t i, int j, const merge::slice& s) {
//     store(out + i * 128 + j * merge::slice_elems, s.o);
//   });
//
// Every combine folds in FP32 in rank order 0..N-1 (fused::combine's rule), so all ranks get the
// same bits. Indices are global (a rank adds the offset of its shard) and unsigned 32-bit.
// Order of (value, index) pairs, shared by argmax and topk: a larger value first; NaN before every
// number (as torch.argmax and numpy.argmax, which return the first NaN's index); equal values
// (+0 and -0 are equal) and NaNs among themselves by the lower index. An empty entry is
// (-inf, 0xFFFFFFFF): after every real entry, a real -inf included.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../config.hpp"
#include "../core/float_types.hpp"
#include "../core/types.hpp"
#include "../gpu/memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

namespace detail {
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE constexpr float neg_inf() { return -__builtin_huge_valf(); }
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE constexpr bool is_nan(float x) { return x != x; }
// Does (va, ia) come before (vb, ib) in the order above?
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE constexpr bool ranks_before(float va, std::uint32_t ia, float vb, std::uint32_t ib) {
  const bool na = is_nan(va), nb = is_nan(vb);
  if (na != nb) return na;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}
}  // namespace detail

// Attention across ranks (split-KV or context-parallel decode): each rank holds, per (token, head),
// its partial output O_r (softmax-normalised over its own keys) and the log-sum-exp L_r of its
// scores. The merge is L = log sum_r exp(L_r), O = sum_r exp(L_r - L) O_r, computed with a running
// maximum (rescaled as it grows) in FP32 and rounded to T once. A rank without keys for a head has
// L_r = -inf: it is skipped (its O_r is never read into the sum, whatever it holds, NaN included);
// if every rank has -inf the result is O = 0, L = -inf. A NaN L_r gives a NaN result.
// T: float, rcclx::bf16 or rcclx::fp16. HeadDim: a multiple of 8 up to 256 (64, 128, 256 tested).
// One record per head. Sliced (combine::reduce_slices): slice j of a head is O's elements
// [j * slice_elems, (j + 1) * slice_elems) (one 16-byte vector: 8 bf16 / fp16 or 4 float) and L;
// each slice is merged by its own thread, which also runs the scalar part of the merge (m, s, L)
// as every thread of the head does: the same bits as init/fold/finalize (one arithmetic, below,
// for both), HeadDim / slice_elems threads per head instead of one carrying HeadDim accumulators.
template <class T, int HeadDim>
struct lse_merge {
  static constexpr std::uint32_t check_id = 1;  // the checked mode's fingerprint (fused::combine)
  static_assert(core::is_float_type_v<T>, "rcclx::fused::lse_merge: T must be float, rcclx::bf16 or rcclx::fp16");
  static_assert(HeadDim > 0 && HeadDim % 8 == 0 && HeadDim <= 256,
                "rcclx::fused::lse_merge: HeadDim must be a multiple of 8 in [8, 256]");
  static constexpr int head_dim = HeadDim;
  static constexpr int slice_elems = static_cast<int>(16 / sizeof(T));  // elements of O per slice
  static constexpr int slices = HeadDim / slice_elems;

  struct alignas(16) record {
    T o[HeadDim];  // partial output, normalised over this rank's keys
    float lse;     // log-sum-exp of this rank's scores (-inf: no keys)
  };
  struct accumulator {
    float m;  // largest L_r so far
    float s;  // sum of exp(L_r - m)
    float o[HeadDim];  // sum of exp(L_r - m) O_r
  };
  struct alignas(16) slice {
    T o[slice_elems];  // O's elements [j * slice_elems, (j + 1) * slice_elems) of slice j
    float lse;
  };
  struct slice_accumulator {
    float m, s;
    float o[slice_elems];
  };

  RCCLX_HOST_DEVICE accumulator init(const record& r) const { return start<accumulator>(r); }
  RCCLX_HOST_DEVICE void fold(accumulator& a, const record& r) const { add(a, r); }
  RCCLX_HOST_DEVICE record finalize(const accumulator& a) const { return finish<record>(a); }

  // Slice j of a record (one 16-byte load of O, and L) and back; store_slice writes L for slice 0
  // only (the tree algorithm's published results).
  RCCLX_HOST_DEVICE slice load_slice(const record& r, int j) const {
    const piece x = piece_of(r, j);
    slice s;
    for (int d = 0; d < slice_elems; ++d) s.o[d] = x.o[d];
    s.lse = r.lse;
    return s;
  }
  RCCLX_HOST_DEVICE void store_slice(record& r, int j, const slice& s) const {
    piece x;
    for (int d = 0; d < slice_elems; ++d) x.o[d] = s.o[d];
    const gpu::vec16 v = gpu::bit_cast<gpu::vec16>(x);
#if RCCLX_DEVICE_COMPILE
    *reinterpret_cast<gpu::vec16*>(r.o + j * slice_elems) = v;
#else
    std::memcpy(r.o + j * slice_elems, &v, sizeof(v));
#endif
    if (j == 0) r.lse = s.lse;
  }
  // The merge of one slice of every rank's record: init (rank 0), fold (ranks 1..N-1), finalize.
  // A slice with L = -inf adds nothing (its O is not read into the sum).
  RCCLX_HOST_DEVICE slice_accumulator init_slice(const slice& x) const { return start<slice_accumulator>(x); }
  RCCLX_HOST_DEVICE void fold_slice(slice_accumulator& a, const slice& x) const { add(a, x); }
  RCCLX_HOST_DEVICE slice finalize_slice(const slice_accumulator& a) const { return finish<slice>(a); }

 private:
  struct piece {
    T o[slice_elems];
  };
  static_assert(sizeof(piece) == 16, "rcclx::fused::lse_merge: a slice is one 16-byte vector");

  // Slice j of r's O by one 16-byte load (r may be in any memory: a generic access).
  RCCLX_HOST_DEVICE static piece piece_of(const record& r, int j) {
#if RCCLX_DEVICE_COMPILE
    const gpu::vec16 v = *reinterpret_cast<const gpu::vec16*>(r.o + j * slice_elems);  // one 16-byte load
    return gpu::bit_cast<piece>(v);  // (a bit_cast of the memory itself would copy it byte by byte)
#else
    piece x;
    std::memcpy(&x, r.o + j * slice_elems, sizeof(x));
    return x;
#endif
  }

  // The merge's arithmetic, shared by the whole-record and the sliced members (the same
  // expressions, so the same bits): x is a record or a slice (its O and L), a the accumulator of
  // its width (m, s and the weighted sum of O).
  template <class Acc, class X>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static Acc start(const X& x) {
    Acc a;
    const bool empty = x.lse == detail::neg_inf();
    a.m = x.lse;
    a.s = empty ? 0.0f : 1.0f;
    for (int d = 0; d < width<Acc>; ++d) a.o[d] = empty ? 0.0f : static_cast<float>(x.o[d]);
    return a;
  }
  template <class Acc, class X>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static void add(Acc& a, const X& x) {
    if (x.lse == detail::neg_inf()) return;  // no keys: weight 0, O_r unread
    if (x.lse > a.m) {                       // a new maximum: rescale what was summed
      const float c = expf(a.m - x.lse);     // m = -inf (nothing summed yet): 0
      a.s = a.s * c + 1.0f;
      for (int d = 0; d < width<Acc>; ++d) a.o[d] = a.o[d] * c + static_cast<float>(x.o[d]);
      a.m = x.lse;
    } else {  // also a NaN on either side: the sum becomes NaN
      const float w = expf(x.lse - a.m);
      a.s += w;
      for (int d = 0; d < width<Acc>; ++d) a.o[d] += w * static_cast<float>(x.o[d]);
    }
  }
  // O rounded to T, and L.
  template <class Out, class Acc>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static Out finish(const Acc& a) {
    Out r;
    if (a.s == 0.0f) {  // every rank empty
      for (int d = 0; d < width<Acc>; ++d) r.o[d] = T(0.0f);
      r.lse = detail::neg_inf();
      return r;
    }
    const float inv = 1.0f / a.s;
    for (int d = 0; d < width<Acc>; ++d) r.o[d] = T(a.o[d] * inv);
    r.lse = a.m + logf(a.s);
    return r;
  }
  template <class Acc>
  static constexpr int width = static_cast<int>(sizeof(Acc::o) / sizeof(float));
};

// The global (largest value, its index). Ties go to the lower index; NaN is the largest (see the
// order above). A rank with nothing to offer contributes argmax::empty().
struct argmax {
  static constexpr std::uint32_t check_id = 2;  // the checked mode's fingerprint (fused::combine)
  struct record {
    float value;
    std::uint32_t index;
  };
  RCCLX_HOST_DEVICE static constexpr record empty() { return {detail::neg_inf(), 0xFFFFFFFFu}; }
  // Does a come before b (a is the better candidate)?
  RCCLX_HOST_DEVICE static constexpr bool before(const record& a, const record& b) {
    return detail::ranks_before(a.value, a.index, b.value, b.index);
  }
  // Keeps the better of r and (value, index): a rank's own scan over its shard.
  RCCLX_HOST_DEVICE static void push(record& r, float value, std::uint32_t index) {
    if (detail::ranks_before(value, index, r.value, r.index)) r = {value, index};
  }

  RCCLX_HOST_DEVICE record init(const record& r) const { return r; }
  RCCLX_HOST_DEVICE void fold(record& a, const record& r) const {
    if (before(r, a)) a = r;
  }
  RCCLX_HOST_DEVICE record finalize(const record& a) const { return a; }
};

// The K best (value, index) pairs, sorted best first (the order above). K in [1, 64]. A rank's
// record is its own K best (fewer real entries padded with empty ones, as empty() is); the result
// is the K best of all ranks. No arithmetic: the merge only compares. A selection combine:
// combine::reduce_entries places every entry by its own thread (the same bits as reduce, whose one
// thread per record merges K entries per rank in turn).
template <int K>
struct topk {
  static constexpr std::uint32_t check_id = 3;  // the checked mode's fingerprint (fused::combine)
  static_assert(K >= 1 && K <= 64, "rcclx::fused::topk: K must be in [1, 64]");
  static constexpr int k = K;

  struct record {
    float value[K];
    std::uint32_t index[K];
  };
  RCCLX_HOST_DEVICE static record empty() {
    record r;
    for (int i = 0; i < K; ++i) {
      r.value[i] = detail::neg_inf();
      r.index[i] = 0xFFFFFFFFu;
    }
    return r;
  }
  // Inserts (value, index) if it is among the K best so far: a rank's own scan over its shard.
  RCCLX_HOST_DEVICE static void push(record& r, float value, std::uint32_t index) {
    if (!detail::ranks_before(value, index, r.value[K - 1], r.index[K - 1])) return;
    int i = K - 1;
    for (; i > 0 && detail::ranks_before(value, index, r.value[i - 1], r.index[i - 1]); --i) {
      r.value[i] = r.value[i - 1];
      r.index[i] = r.index[i - 1];
    }
    r.value[i] = value;
    r.index[i] = index;
  }
  // The K best of two sorted lists, sorted (e.g. a block's own tree of partial top-k lists).
  RCCLX_HOST_DEVICE static record merge(const record& a, const record& b) {
    record r;
    int i = 0, j = 0;
    for (int o = 0; o < K; ++o) {
      if (detail::ranks_before(b.value[j], b.index[j], a.value[i], a.index[i])) {
        r.value[o] = b.value[j];
        r.index[o] = b.index[j];
        ++j;  // at most K - 1 taken before the last output: j stays in range
      } else {
        r.value[o] = a.value[i];
        r.index[o] = a.index[i];
        ++i;
      }
    }
    return r;
  }

  // A selection (combine::reduce_entries: a thread per entry of every rank's list instead of one
  // merging whole lists). An entry is an argmax record.
  static constexpr int entries = K;
  using entry = argmax::record;
  RCCLX_HOST_DEVICE entry load_entry(const record& r, int p) const { return {r.value[p], r.index[p]}; }
  RCCLX_HOST_DEVICE void store_entry(record& r, int p, const entry& e) const {
    r.value[p] = e.value;
    r.index[p] = e.index;
  }
  RCCLX_HOST_DEVICE static constexpr bool before(const entry& a, const entry& b) { return argmax::before(a, b); }
  // The order as one integer (merge_entries compares keys): before(a, b) exactly when key(a) >
  // key(b). High word: NaN highest, then the float's order (-0 as +0); low word: ~index.
  RCCLX_HOST_DEVICE static std::uint64_t key(const entry& e) {
    std::uint32_t hi = 0xFFFFFFFFu;
    if (!detail::is_nan(e.value)) {
      const std::uint32_t b = gpu::bit_cast<std::uint32_t>(e.value == 0.0f ? 0.0f : e.value);
      hi = (b & 0x80000000u) != 0 ? ~b : (b | 0x80000000u);
    }
    return (static_cast<std::uint64_t>(hi) << 32) | (0xFFFFFFFFu - e.index);
  }

  RCCLX_HOST_DEVICE record init(const record& r) const { return r; }
  RCCLX_HOST_DEVICE void fold(record& a, const record& r) const { a = merge(a, r); }
  RCCLX_HOST_DEVICE record finalize(const record& a) const { return a; }
};

// The softmax normaliser over all ranks' logits: the largest value m and s = sum exp(x - m), so
// softmax(x) = exp(x - m) / s and logsumexp = m + log(s). Combined as lse_merge's scalars: the
// running maximum rescales the sum as it grows; a record with m = -inf (empty, or only -inf logits)
// adds nothing. A NaN logit makes the result NaN; if every logit is -inf the result is (-inf, 0).
struct softmax_stats {
  static constexpr std::uint32_t check_id = 4;  // the checked mode's fingerprint (fused::combine)
  struct record {
    float max;  // largest logit (-inf: none)
    float sum;  // sum of exp(x - max)
  };
  RCCLX_HOST_DEVICE static constexpr record empty() { return {detail::neg_inf(), 0.0f}; }
  // Adds one logit: a rank's own scan over its shard.
  RCCLX_HOST_DEVICE static void push(record& r, float x) { add(r, {x, 1.0f}); }
  // Adds the statistics of another set of logits (the fold).
  RCCLX_HOST_DEVICE static void add(record& a, const record& r) {
    if (r.max == detail::neg_inf()) return;  // empty, or -inf logits only: exp(-inf - m) = 0
    if (r.max > a.max) {
      a.sum = a.sum * expf(a.max - r.max) + r.sum;  // a empty: 0 * 0
      a.max = r.max;
    } else {  // also NaN on either side: the sum becomes NaN
      a.sum += r.sum * expf(r.max - a.max);
    }
  }

  RCCLX_HOST_DEVICE record init(const record& r) const { return r; }
  RCCLX_HOST_DEVICE void fold(record& a, const record& r) const { add(a, r); }
  RCCLX_HOST_DEVICE record finalize(const record& a) const { return a; }
};

}  // namespace fused
RCCLX_NAMESPACE_END
