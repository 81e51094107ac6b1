// rcclx/kernel/reduce.hpp: the one rank-order reduction. Every ready-made reduction (the DDA flat,
// tree, LL one-shot and ReduceScatter, the LPC units) folds the ranks of a *source* through
// fold_ranks; their "same bits" rests on this single loop. Part of rcclx/kernel/: internal but
// shared by the collectives; readable, not a public API.
//
//   // one 16-byte vector summed over every rank's buffer, in rank order, in fp32:
//   const rcclx::kernel::peer_ptrs<rcclx::bf16, 8> src(table);
//   rcclx::gpu::vec16 v = rcclx::kernel::reduce_vec<rcclx::core::op_sum>(src, off);
//   // any source and any fold (the general form the others are built on):
//   float acc[16];
//   bool ok = rcclx::kernel::fold_ranks<8, 8>(my_source, n, rcclx::kernel::rank_order<op, float, 16>{acc});
//
// The contract (what the determinism test pins): rank p's values reach the fold in the order
// p = 0, 1, ..., n-1, whatever the order in which loads return. Loads are issued Batch ranks at a
// time, all of a batch before any is used (Batch x 16 bytes in flight per thread for peer vectors),
// so latency is paid once per batch, not once per rank.
//
// A source (peer pointers: vector_source below; LL packets: kernel/ll_reduce.hpp; FP8 slots:
// lpc/detail/units.hpp) is a small struct with
//   using loaded = ...;                                     // one rank's raw load
//   void load(int p, loaded& x) const;                      // issue rank p's load, do not use it
//   template <int B> bool landed(int p0, int n, loaded (&x)[B]);  // (e.g. wait for LL packets);
//                                                           // false fails the reduction
// and what its fold reads of a load: for rank_order below (the element-wise ReduceOp, fp32 or
// int32 accumulators),
//   void values(int p, const loaded& x, Acc (&y)[E]) const; // rank p's values, widened
// (deriving from source_base gives a landed() that has nothing to wait for). A fold is called as
// fold(p, src, loaded) once per rank, in rank order; a combine of records (fused/combine.hpp) folds
// its own record type the same way (its fold: init from rank 0's record, fold the others).
#pragma once

#include <cstddef>
#include <type_traits>

#include "../core/ops.hpp"
#include "../gpu/memory.hpp"
#include "vector_io.hpp"

// Peers whose 16-byte loads are issued together before any arithmetic. A macro only so that the
// gfx942 ISA check (tests/compile/isa/dda.cmake) can prove it detects unbatched loads; never change
// it in real code.
#ifndef RCCLX_DETAIL_PEER_BATCH
#  define RCCLX_DETAIL_PEER_BATCH 8
#endif

// Loops over ranks have compile-time trip counts and are unrolled, so every per-rank array (loads,
// pointers) is indexed with constants and stays in registers.
#if RCCLX_DEVICE_COMPILE && (defined(__clang__) || defined(__CUDA_ARCH__))
#  define RCCLX_DETAIL_KERNEL_UNROLL _Pragma("unroll")
#else
#  define RCCLX_DETAIL_KERNEL_UNROLL
#endif

RCCLX_NAMESPACE_BEGIN
namespace kernel {

// Ranks per batch of loads for a table of MaxRanks ranks.
template <int MaxRanks, int Limit = RCCLX_DETAIL_PEER_BATCH>
inline constexpr int peer_batch = MaxRanks < Limit ? MaxRanks : Limit;

// What a source without a wait derives from. rank0_untested: rank 0's batch is folded without a
// test against n (n >= 1 always; peer vectors and LL packets), else every batch and rank is tested
// (FP8 slots). The same arithmetic either way: of the two loop shapes, each source takes the one
// whose generated code is closest to what its loop compiled to before they shared this one
// (measured: registers and spills per kernel, sm_90). up_to_n (one rank at a time only): the
// loop over ranks 1..n-1 is bounded by n itself, not by MaxRanks with a test per rank, so the
// compiler may unroll it by a count of its own and issue several ranks' loads before their folds
// (a combine's records: sm_90 takes four ranks at a time, where the loop tested per rank waits for
// each rank's load before it issues the next).
struct source_base {
  static constexpr bool rank0_untested = false;
  static constexpr bool one_at_a_time = false;
  static constexpr bool up_to_n = false;
  template <int Batch, class Loaded>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool landed(int, int, Loaded (&)[Batch]) const {
    return true;
  }
};

namespace detail {
// Ranks p0 .. p0 + Batch - 1 (those below n unless Full): every load, then the wait, then the folds.
// First: the batch of rank 0, whose value is folded unconditionally (it starts the accumulator).
template <int Batch, bool Full, bool First, class Source, class Fold>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fold_batch(Source& src, int p0, int n, Fold& fold) {
  typename Source::loaded x[Batch] = {};  // (initialised only to quiet GCC: every use is guarded)
  RCCLX_DETAIL_KERNEL_UNROLL
  for (int j = 0; j < Batch; ++j)
    if (Full || p0 + j < n) src.load(p0 + j, x[j]);
  if (!src.landed(p0, n, x)) return false;
  if constexpr (First) fold(0, src, x[0]);
  RCCLX_DETAIL_KERNEL_UNROLL
  for (int j = First ? 1 : 0; j < Batch; ++j)
    if (Full || p0 + j < n) fold(p0 + j, src, x[j]);
  return true;
}
template <int Batch, bool WholeBatches, bool First, class Source, class Fold>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fold_step(Source& src, int p0, int n, Fold& fold) {
  if constexpr (WholeBatches)
    if (p0 + Batch <= n) return fold_batch<Batch, true, First>(src, p0, n, fold);
  return fold_batch<Batch, false, First>(src, p0, n, fold);
}
}  // namespace detail

// Folds ranks 0..n-1 (1 <= n <= MaxRanks) of `src` in rank order, Batch ranks' loads at a time
// (rank 0's value is folded unconditionally: the accumulator always starts from it). With
// WholeBatches, a batch that lies wholly below n takes a path without a test per rank (its loads
// straight-line code; the source's arrays must then be padded to whole batches). False if the
// source's landed() failed (the fold has seen only the ranks before that batch).
template <int MaxRanks, int Batch, bool WholeBatches = false, class Source, class Fold>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fold_ranks(Source&& src, int n, Fold&& fold) {
  static_assert(Batch >= 1 && Batch <= MaxRanks, "rcclx::kernel::fold_ranks: Batch in [1, MaxRanks]");
  if constexpr (std::decay_t<Source>::one_at_a_time) {
    // One rank at a time (scalar elements: nothing to batch): rank 0 starts the accumulator, then
    // each rank below n.
    typename std::decay_t<Source>::loaded x{};
    src.load(0, x);
    fold(0, src, x);
    if constexpr (std::decay_t<Source>::up_to_n) {
      for (int p = 1; p < n; ++p) {
        src.load(p, x);
        fold(p, src, x);
      }
    } else {
      for (int p = 1; p < MaxRanks; ++p) {
        if (p < n) {
          src.load(p, x);
          fold(p, src, x);
        }
      }
    }
    return true;
  }
  constexpr bool peel = std::decay_t<Source>::rank0_untested;
  if constexpr (peel)
    if (!detail::fold_step<Batch, WholeBatches, true>(src, 0, n, fold)) return false;
  for (int p0 = peel ? Batch : 0; p0 < MaxRanks; p0 += Batch)  // (a compile-time trip count: unrolled)
    if (p0 < n && !detail::fold_step<Batch, WholeBatches, false>(src, p0, n, fold)) return false;
  return true;
}

// The element-wise fold: acc = rank 0's values, then acc[i] = op(acc[i], x[i]) for ranks 1, 2, ...
// (each rank's values from the source: src.values(p, loaded, x)). `fresh` false continues a sum
// already started (a reduction over several parts: only part 0's rank 0 starts it).
template <class ReduceOp, class Acc, int E>
struct rank_order {
  Acc (&acc)[E];
  bool fresh = true;
  template <class Source, class Loaded>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(int p, const Source& src, const Loaded& loaded) const {
    const ReduceOp op{};
    Acc x[E];
    src.values(p, loaded, x);
    if (p == 0 && fresh) {
      for (int i = 0; i < E; ++i) acc[i] = x[i];
    } else {
      for (int i = 0; i < E; ++i) acc[i] = op(acc[i], x[i]);
    }
  }
};

// Rank p's 16-byte vector at ptr_of(p) + off, loaded with the cache hint Loads.
template <class T, gpu::cache_hint Loads, class PtrOf>
struct vector_source : source_base {
  static constexpr bool rank0_untested = true;
  using traits = core::value_traits<T>;
  using loaded = gpu::vec16;
  static constexpr int elems = gpu::elems_per_vec16<T>;
  PtrOf ptr_of;
  std::size_t off;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int p, gpu::vec16& v) const { v = gpu::load16<Loads>(ptr_of(p) + off); }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void values(int, const gpu::vec16& v,
                                                  typename traits::acc_type (&x)[elems]) const {
    traits::unpack(v, x);
  }
};
template <class T, gpu::cache_hint Loads = gpu::cache_hint::normal, class PtrOf>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE vector_source<T, Loads, PtrOf> make_vector_source(PtrOf ptr_of, std::size_t off) {
  return vector_source<T, Loads, PtrOf>{{}, ptr_of, off};
}

// One 16-byte vector at element offset `off` reduced across ranks 0..n-1 of src, in batches of up
// to RCCLX_DETAIL_PEER_BATCH peers (loads with the cache policy Loads).
template <class ReduceOp, gpu::cache_hint Loads = gpu::cache_hint::normal, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 reduce_vec(const peer_ptrs<T, MaxRanks>& src, std::size_t off) {
  using traits = core::value_traits<T>;
  typename traits::acc_type acc[gpu::elems_per_vec16<T>];
  (void)fold_ranks<MaxRanks, peer_batch<MaxRanks>>(
      make_vector_source<T, Loads>([&](int p) { return src.p[p]; }, off), src.n,
      rank_order<ReduceOp, typename traits::acc_type, gpu::elems_per_vec16<T>>{acc});
  return traits::pack(acc);
}

// Rank p's element `i` (one load each: the partial vector's elements).
template <class T, int MaxRanks>
struct element_source : source_base {
  static constexpr bool rank0_untested = true;
  static constexpr bool one_at_a_time = true;
  using traits = core::value_traits<T>;
  using loaded = T;
  const peer_ptrs<T, MaxRanks>& src;
  std::size_t i;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(int p, T& x) const { x = src.p[p][i]; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void values(int, const T& x, typename traits::acc_type (&y)[1]) const {
    y[0] = traits::load(x);
  }
};

// The same for one element.
template <class ReduceOp, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T reduce_elem(const peer_ptrs<T, MaxRanks>& src, std::size_t i) {
  using traits = core::value_traits<T>;
  typename traits::acc_type acc[1];
  (void)fold_ranks<MaxRanks, 1>(element_source<T, MaxRanks>{{}, src, i}, src.n,
                                rank_order<ReduceOp, typename traits::acc_type, 1>{acc});
  return traits::store(acc[0]);
}

// ---- the same with an op value (core::op_steps: pre and finish; the premul factor) --------------
// The ops with kernels of their own (dda/op_allreduce.hpp): each rank's value goes through op.pre
// (when the op has one) before the fold, the folded value through op.finish(acc, n) once; the rank
// order and the fp32 (int32) accumulators are rank_order's.
template <class ReduceOp, class Acc, int E>
struct rank_order_with {
  Acc (&acc)[E];
  const ReduceOp& op;
  template <class Source, class Loaded>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(int p, const Source& src, const Loaded& loaded) const {
    Acc x[E];
    src.values(p, loaded, x);
    if constexpr (core::op_steps<ReduceOp>::pre)
      for (int i = 0; i < E; ++i) x[i] = op.pre(x[i]);
    if (p == 0) {
      for (int i = 0; i < E; ++i) acc[i] = x[i];
    } else {
      for (int i = 0; i < E; ++i) acc[i] = op(acc[i], x[i]);
    }
  }
};

template <class ReduceOp, class Acc, int E>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void finish_with(const ReduceOp& op, Acc (&acc)[E], int n) {
  if constexpr (core::op_steps<ReduceOp>::finish)
    for (int i = 0; i < E; ++i) acc[i] = op.finish(acc[i], n);
  else
    (void)op, (void)acc, (void)n;
}

// reduce_vec with an op value.
template <class ReduceOp, gpu::cache_hint Loads = gpu::cache_hint::normal, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 reduce_vec_with(const peer_ptrs<T, MaxRanks>& src, std::size_t off,
                                                               const ReduceOp& op) {
  using traits = core::value_traits<T>;
  typename traits::acc_type acc[gpu::elems_per_vec16<T>];
  (void)fold_ranks<MaxRanks, peer_batch<MaxRanks>>(
      make_vector_source<T, Loads>([&](int p) { return src.p[p]; }, off), src.n,
      rank_order_with<ReduceOp, typename traits::acc_type, gpu::elems_per_vec16<T>>{acc, op});
  finish_with(op, acc, src.n);
  return traits::pack(acc);
}

// reduce_elem with an op value.
template <class ReduceOp, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T reduce_elem_with(const peer_ptrs<T, MaxRanks>& src, std::size_t i,
                                                       const ReduceOp& op) {
  using traits = core::value_traits<T>;
  typename traits::acc_type acc[1];
  (void)fold_ranks<MaxRanks, 1>(element_source<T, MaxRanks>{{}, src, i}, src.n,
                                rank_order_with<ReduceOp, typename traits::acc_type, 1>{acc, op});
  finish_with(op, acc, src.n);
  return traits::store(acc[0]);
}

}  // namespace kernel
RCCLX_NAMESPACE_END
