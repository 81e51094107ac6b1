// rcclx/dda/rooted.hpp: Broadcast and Reduce (a root rank), and a barrier, by direct loads: the
// device templates for your kernels and the host launchers for one rank.
//
//   // broadcast: output (count elements, every rank) <- root's input; in place on the root when equal
//   bool ok = rcclx::dda::flat_broadcast(rcclx::gpu::block_group{}, t, in, out, count, root, blockIdx.x, gridDim.x);
//   // reduce: root's output <- op over every rank's input (other ranks' outputs are not written)
//   ok = rcclx::dda::tree_reduce(rcclx::gpu::block_group{}, t, in, out, count, root, blockIdx.x, gridDim.x,
//                                rcclx::core::op_sum{});
//   rcclx::dda::broadcast(t, in, out, count, root, rcclx::algorithm::automatic, stream);   // host launchers
//   rcclx::dda::reduce(t, in, out, count, root, rcclx::reduce_op::avg, rcclx::algorithm::automatic, stream);
//   rcclx::dda::barrier(t, stream);
//
// Algorithms (tiles of the kernel/layout.hpp partition; chunks of chunk_tiles, chunk q "owned" by rank q):
//  flat_broadcast (one-shot, small messages): the root copies its input into its symmetric buffer
//    (skipped when it is that buffer) and its output; start barrier; every other rank copies the
//    root's buffer into its output; end barrier. 2 barriers; the root serves (N-1)S.
//  tree_broadcast (two-step, large): the root stages as above; start barrier; scatter: rank r != root
//    copies chunk r of the root's buffer into its own buffer and output; mid barrier; allgather:
//    every rank != root copies chunk q from rank q's buffer, q != r; end barrier. 3 barriers; the
//    root serves S (N-1)/N, every link (N-1)S/N.
//  flat_reduce (one-shot): every rank copies its input into its symmetric buffer (skipped when it is
//    that buffer); start barrier; the root reduces every rank's buffer into its output; end barrier.
//  tree_reduce (two-step: reduce-scatter + gather): staging and start barrier as flat_reduce; rank r
//    reduces chunk r of every buffer into its own buffer (the root: into its output too); mid
//    barrier; the root copies chunk q of rank q's buffer into its output; end barrier.
//  barrier: every block crosses a barrier with the same block of every peer.
// Reduce folds ranks 0..N-1 in rank order with kernel::reduce_vec_with (op.pre, fp32 or int32
// accumulators, op.finish, one rounding to T): the same bits as dda::allreduce of that op, flat and
// tree alike. Broadcast copies bits. Every wait is a bounded barrier (signal_pads::timeout_ns):
// false when a peer never arrived, the error recorded in the rank's pad.
//
// Preconditions (the launchers check them): the same count, root, algorithm and grid on every rank;
// root in [0, N); count * sizeof(T) <= table.capacity(); the root's broadcast input (any rank's
// reduce input) is this rank's symmetric buffer or disjoint from it; the output (every rank's for
// broadcast, the root's for reduce) is disjoint from it; on the root, input and output are equal or
// disjoint. Ranks other than the root may pass a null input (broadcast) or output (reduce).
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>

#include "../core/barrier.hpp"
#include "../core/call_check.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/checks.hpp"
#include "../kernel/launch.hpp"
#include "../kernel/layout.hpp"
#include "../kernel/vector_io.hpp"
#include "detail/call_check.hpp"
#include "launch_config.hpp"
#include "op_allreduce.hpp"
#include "select.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

namespace detail {
// The checked mode's call check of a broadcast or reduce (core/call_check.hpp: the root in the
// fingerprint's shape word), before any store; always true without RCCLX_CHECKS.
template <class T, class ReduceOp, class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool rooted_call_matches(const Group& g, const core::signal_pads<MaxRanks>& s,
                                                             core::checked_collective c, algorithm algo,
                                                             std::size_t count, int root, int block, int num_blocks) {
#if RCCLX_CHECKS
  return fingerprint_matches(g, s, block, core::fingerprint<T, ReduceOp>(c, algo, count, num_blocks,
                                                                         static_cast<std::size_t>(static_cast<unsigned>(root))));
#else
  (void)g, (void)s, (void)c, (void)algo, (void)count, (void)root, (void)block, (void)num_blocks;
  return true;
#endif
}

// src into a and b (either may be null or src itself: skipped), one load per vector.
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_into(const kernel::layout<T>& l, int tid, kernel::tile_range r,
                                                   const T* src, T* a, T* b) {
  if (a == src) a = nullptr;
  if (b == src || b == a) b = nullptr;
  if (!a) a = b, b = nullptr;
  if (a) kernel::copy_owned(l, tid, r, src, a, b);
}
}  // namespace detail

// ---- broadcast -------------------------------------------------------------------------------------

// One-shot Broadcast (see the header comment). T: any element type whose size divides 16.
// Group-collective; false if a barrier timed out (leave the kernel).
template <class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool flat_broadcast(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                      T* output, std::size_t count, int root, int block, int num_blocks) {
  static_assert(16 % sizeof(T) == 0, "dda::flat_broadcast: sizeof(T) must divide 16");
  if (count == 0) return true;
  if (!detail::rooted_call_matches<T, core::op_sum>(g, t.signals, core::checked_collective::broadcast,
                                                    algorithm::flat, count, root, block, num_blocks))
    return false;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  const int tid = g.thread_rank(), r = t.rank();
  if (r == root) detail::copy_into(l, tid, all, input, t.data[r], output);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  if (r != root) kernel::copy_owned(l, tid, all, static_cast<const T*>(t.data[root]), output);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// Two-step Broadcast: scatter from the root, then allgather (see the header comment).
template <class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool tree_broadcast(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                      T* output, std::size_t count, int root, int block, int num_blocks) {
  static_assert(16 % sizeof(T) == 0, "dda::tree_broadcast: sizeof(T) must divide 16");
  if (count == 0) return true;
  if (!detail::rooted_call_matches<T, core::op_sum>(g, t.signals, core::checked_collective::broadcast,
                                                    algorithm::tree, count, root, block, num_blocks))
    return false;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  if (r == root) detail::copy_into(l, tid, kernel::tile_range{0, l.tiles}, input, t.data[r], output);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  if (r != root)
    kernel::copy_owned(l, tid, kernel::chunk_tiles(l.tiles, n, r), static_cast<const T*>(t.data[root]), t.data[r], output);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::mid)) return false;
  if (r != root) {
    for (int s = 1; s < n; ++s) {
      const int q = r + s < n ? r + s : r + s - n;
      kernel::copy_owned(l, tid, kernel::chunk_tiles(l.tiles, n, q), static_cast<const T*>(t.data[q]), output);
    }
  }
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// ---- reduce ----------------------------------------------------------------------------------------

// One-shot Reduce to `root` with an op value (core::op_sum, op_min, op_max, op_product, op_avg,
// op_premul_sum). Only the root writes its output. Group-collective; false if a barrier timed out.
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool flat_reduce(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input, T* output,
                                   std::size_t count, int root, int block, int num_blocks, ReduceOp op) {
  static_assert(detail::op_takes<ReduceOp, T>(), "dda::flat_reduce: T must be float, bf16, fp16 or int32_t "
                                                 "(premul_sum: floating types)");
  if (count == 0) return true;
  if (!detail::rooted_call_matches<T, ReduceOp>(g, t.signals, core::checked_collective::reduce,
                                                algorithm::flat, count, root, block, num_blocks))
    return false;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  const int tid = g.thread_rank(), r = t.rank();
  T* own = t.data[r];
  if (input != own) kernel::copy_owned(l, tid, all, input, own);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  if (r == root)
    detail::reduce_owned(l, tid, all, kernel::peer_ptrs<T, MaxRanks>(t), true, output, static_cast<T*>(nullptr), op);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// Two-step Reduce to `root`: reduce-scatter, then the root gathers (see the header comment).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool tree_reduce(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input, T* output,
                                   std::size_t count, int root, int block, int num_blocks, ReduceOp op) {
  static_assert(detail::op_takes<ReduceOp, T>(), "dda::tree_reduce: T must be float, bf16, fp16 or int32_t "
                                                 "(premul_sum: floating types)");
  if (count == 0) return true;
  if (!detail::rooted_call_matches<T, ReduceOp>(g, t.signals, core::checked_collective::reduce,
                                                algorithm::tree, count, root, block, num_blocks))
    return false;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  T* own = t.data[r];
  if (input != own) kernel::copy_owned(l, tid, kernel::tile_range{0, l.tiles}, input, own);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  // Chunk r of every buffer, reduced into this rank's buffer (read back by the root), and the
  // root's output. Peers read only their own chunks of this buffer meanwhile.
  detail::reduce_owned(l, tid, kernel::chunk_tiles(l.tiles, n, r), kernel::peer_ptrs<T, MaxRanks>(t), true,
                       r == root ? output : own, r == root ? own : static_cast<T*>(nullptr), op);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::mid)) return false;
  if (r == root) {
    for (int s = 1; s < n; ++s) {
      const int q = r + s < n ? r + s : r + s - n;
      kernel::copy_owned(l, tid, kernel::chunk_tiles(l.tiles, n, q), static_cast<const T*>(t.data[q]), output);
    }
  }
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// ---- barrier ---------------------------------------------------------------------------------------

// Every block waits for the same block of every peer (bounded). Group-collective; false on a timeout.
template <class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flat_barrier(const Group& g, const core::peer_table<T, MaxRanks>& t, int block) {
  return core::barrier(g, t.signals, block, core::barrier_kind::start);
}

// The checks of a broadcast or reduce call that need no table (a launcher over dda::broadcast /
// dda::reduce runs them before it picks a table); returns the algorithm it runs (flat or tree).
// in_needed / out_needed: this rank passes a buffer the call reads / writes.
template <class T>
inline algorithm check_rooted_call(const std::string& who, int n, int max_ranks, const T* input, const T* output,
                                   std::size_t count, int root, algorithm algo, int num_blocks, bool in_needed,
                                   bool out_needed) {
  kernel::check_algorithm(who, algo);
  if (algo == algorithm::low_precision)
    throw error(errc::unsupported, who + ": algorithm::low_precision is not offered here (flat, tree or automatic)");
  kernel::check_num_ranks(who, n, max_ranks);
  kernel::check_num_blocks(who, num_blocks);
  if (root < 0 || root >= n)
    throw error(errc::invalid_argument, who + ": root = " + std::to_string(root) + " is outside [0, " +
                                            std::to_string(n) + ") (num_ranks = " + std::to_string(n) + ")");
  kernel::check_count<T>(who, count);
  if (count > 0) {
    if (in_needed) kernel::check_user_pointer<T>(who, "input", input);
    if (out_needed) kernel::check_user_pointer<T>(who, "output", output);
    if (in_needed && out_needed && input != output && kernel::overlaps(input, output, count * sizeof(T)))
      throw error(errc::invalid_argument, who + ": input and output overlap partially (they must be equal or disjoint)");
  }
  return algo == algorithm::automatic ? select_algorithm(count * sizeof(T), n) : algo;
}

namespace detail {

template <algorithm Algo, class T>
struct broadcast_body {
  const T* input;
  T* output;
  std::size_t count;
  int root;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    if constexpr (Algo == algorithm::flat) return flat_broadcast(g, t, input, output, count, root, block, num_blocks);
    else return tree_broadcast(g, t, input, output, count, root, block, num_blocks);
  }
};

template <class ReduceOp, algorithm Algo, class T>
struct reduce_body {
  const T* input;
  T* output;
  std::size_t count;
  int root;
  ReduceOp op;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    if constexpr (Algo == algorithm::flat)
      return flat_reduce(g, t, input, output, count, root, block, num_blocks, resolve_op<T>(op));
    else
      return tree_reduce(g, t, input, output, count, root, block, num_blocks, resolve_op<T>(op));
  }
};

struct barrier_body {
  template <class Group, class T, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block, int) const {
    return flat_barrier(g, t, block);
  }
};

// Checks of a table the host can read and the grid: capacity, blocks, the symmetric buffer rules.
template <class T, int MaxRanks>
inline void check_rooted_table(const std::string& who, const core::peer_table<T, MaxRanks>& t, const T* input,
                               const T* output, std::size_t count, int blocks, bool in_needed, bool out_needed) {
  kernel::check_table(who, t, count, count * sizeof(T), "the input", blocks);
  if (count == 0) return;
  const T* own = t.data[t.rank()];
  if (in_needed && input != own && kernel::overlaps(input, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": input overlaps this rank's symmetric buffer without being it");
  if (out_needed && kernel::overlaps(output, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": output overlaps this rank's symmetric buffer (peers read it)");
}

// Both table forms of both rooted launchers: checks, shape (dda::allreduce's for the algorithm),
// launch. Reduce when Reduces, with `spec`.
template <bool Reduces, class T, int MaxRanks, class Table>
inline void rooted(const char* fn, const Table& table, const T* input, T* output, std::size_t count, int root,
                   const reduce_spec& spec, algorithm algo, gpu::stream_t stream, int num_blocks, int threads) {
  const std::string who = kernel::name_of(fn, table);
  const int n = kernel::num_ranks_of(table);
  const core::peer_table<T, MaxRanks>* t = kernel::readable(who, table);
  // Which buffers this rank passes (a table in device memory: the caller states its rank by the
  // pointers alone, so both are checked when present).
  const int rank = t ? t->rank() : -1;
  const bool in_needed = Reduces ? true : (t ? rank == root : input != nullptr);
  const bool out_needed = Reduces ? (t ? rank == root : output != nullptr) : true;
  if constexpr (Reduces) kernel::check_spec<T>(who, spec);
  const algorithm a = check_rooted_call<T>(who, n, MaxRanks, input, output, count, root, algo, num_blocks, in_needed,
                                           out_needed);
  const launch_config cfg =
      launch_config_for(who, count * sizeof(T), a, t ? t->signals.max_blocks : default_max_blocks, threads);
  const kernel::grid_shape shape{num_blocks > 0 ? num_blocks : num_blocks_for<T>(count, a, n, cfg), cfg.threads};
  if (t) check_rooted_table(who, *t, input, output, count, shape.blocks, in_needed, out_needed);
  if (count == 0) return;
  const kernel::table_need need{n, count * sizeof(T)};
  if constexpr (Reduces) {
    with_any_op(reduce_spec{core::effective_op<T>(spec.op), spec.factor, spec.factor_device}, [&](auto op) {
      using Op = decltype(op);
      if constexpr (op_takes<Op, T>()) {
        using flat_body = reduce_body<Op, algorithm::flat, T>;
        using tree_body = reduce_body<Op, algorithm::tree, T>;
        if (a == algorithm::flat)
          kernel::launch(who, table, need, shape, flat_body{input, output, count, root, op}, stream,
                         kernel::also_preload<tree_body>{});
        else
          kernel::launch(who, table, need, shape, tree_body{input, output, count, root, op}, stream,
                         kernel::also_preload<flat_body>{});
      }
    });
  } else {
    using flat_body = broadcast_body<algorithm::flat, T>;
    using tree_body = broadcast_body<algorithm::tree, T>;
    if (a == algorithm::flat)
      kernel::launch(who, table, need, shape, flat_body{input, output, count, root}, stream, kernel::also_preload<tree_body>{});
    else
      kernel::launch(who, table, need, shape, tree_body{input, output, count, root}, stream, kernel::also_preload<flat_body>{});
  }
}

}  // namespace detail

// Broadcast of `count` elements from `root`: every rank's output <- the root's input (bit copies).
// input: read on the root only (other ranks may pass null); input == output on the root is in
// place. algo: flat (one-shot), tree (scatter + allgather) or automatic (dda::select_algorithm by
// size, as AllReduce). Errors (rcclx::error, before any launch): root outside [0, N), algorithm
// low_precision (unsupported), the checks of dda::allreduce (null or misaligned buffers, partial
// overlaps, capacity, blocks, the symmetric buffer rules of the header comment).
template <class T, int MaxRanks>
void broadcast(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count, int root,
               algorithm algo = algorithm::automatic, gpu::stream_t stream = {}, int num_blocks = 0, int threads = 0) {
  detail::rooted<false, T, MaxRanks>("rcclx::dda::broadcast", table, input, output, count, root, reduce_spec{}, algo,
                                     stream, num_blocks, threads);
}
// The same with the table in device memory (the kernel checks rank count, capacity and grid).
template <class T, int MaxRanks>
void broadcast(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
               std::size_t count, int root, algorithm algo = algorithm::automatic, gpu::stream_t stream = {},
               int num_blocks = 0, int threads = 0) {
  detail::rooted<false, T, MaxRanks>("rcclx::dda::broadcast", kernel::device_table<T, MaxRanks>{device_table, num_ranks},
                                     input, output, count, root, reduce_spec{}, algo, stream, num_blocks, threads);
}

// Reduce of `count` elements to `root`: the root's output[i] = op over every rank's input[i] (the
// same bits as dda::allreduce with that op); other ranks' outputs are not written (they may pass
// null). T: float, bf16, fp16, int32_t; op: any reduce_op, or a reduce_spec (premul_sum's factor).
// Errors as broadcast, plus check_spec's (premul_sum on integers, a factor that is not finite).
template <class T, int MaxRanks>
void reduce(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count, int root,
            reduce_spec op = reduce_op::sum, algorithm algo = algorithm::automatic, gpu::stream_t stream = {},
            int num_blocks = 0, int threads = 0) {
  detail::rooted<true, T, MaxRanks>("rcclx::dda::reduce", table, input, output, count, root, op, algo, stream,
                                    num_blocks, threads);
}
template <class T, int MaxRanks>
void reduce(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
            std::size_t count, int root, reduce_spec op = reduce_op::sum, algorithm algo = algorithm::automatic,
            gpu::stream_t stream = {}, int num_blocks = 0, int threads = 0) {
  detail::rooted<true, T, MaxRanks>("rcclx::dda::reduce", kernel::device_table<T, MaxRanks>{device_table, num_ranks},
                                    input, output, count, root, op, algo, stream, num_blocks, threads);
}

// Every rank's blocks wait for every peer's (bounded by the pads' timeout_ns; a peer that never
// arrives is a recorded error, thrown on the host backend). num_blocks: the pad slots crossed (1).
template <class T, int MaxRanks>
void barrier(const core::peer_table<T, MaxRanks>& table, gpu::stream_t stream = {}, int num_blocks = 1) {
  const std::string who = "rcclx::dda::barrier";
  kernel::check_num_ranks(who, table.num_ranks(), MaxRanks);
  if (num_blocks < 1) throw error(errc::invalid_argument, who + ": num_blocks = " + std::to_string(num_blocks) + " < 1");
  kernel::check_blocks_fit(who, num_blocks, table.signals);
  kernel::launch(who, table, kernel::table_need{table.num_ranks(), 0}, kernel::grid_shape{num_blocks, RCCLX_GPU_BLOCKS ? 64 : 1},
                 detail::barrier_body{}, stream);
}

}  // namespace dda
RCCLX_NAMESPACE_END
