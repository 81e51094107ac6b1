// rcclx/dda/strided.hpp: AllGather, ReduceScatter and AlltoAll whose blocks lie `stride` elements
// apart in the caller's buffers while the symmetric buffers hold them back to back: a call of any
// size runs as several of these, each moving a slice [off, off + count) of every block through the
// workspace (host::communicator cuts its calls so). The device templates for your kernels and the
// host launchers for one rank.
//
//   // slice [off, off + k) of an AllGather of `total` elements per rank (output: num_ranks * total):
//   rcclx::dda::allgather_strided(t, in + off, out + off, k, total, stream);
//   // slice of a ReduceScatter of num_ranks blocks of C elements (output C elements):
//   rcclx::dda::reduce_scatter_strided(t, in + off, out + off, k, C, rcclx::reduce_op::sum, stream);
//   rcclx::dda::alltoall_strided(t, in + off, out + off, k, C, stream);   // blocks of C elements
//
// Algorithms (one-shot, 2 barriers, tiles of `count` elements per block, kernel/layout.hpp), for rank r:
//  allgather_strided: input -> own symmetric buffer and output block r; start barrier; output block p
//    <- rank p's buffer (p = r+1, r+2, ...); end barrier. Symmetric buffer: count elements.
//  reduce_scatter_strided: input block c (at c * stride) -> own buffer block c (at c * count), c != r;
//    start barrier; output <- block r of every rank, in rank order (rank r: its input), with the fold
//    of kernel::reduce_vec_with (the same bits as dda::reduce_scatter and dda::allreduce); end barrier.
//    Symmetric buffer: num_ranks * count elements.
//  alltoall_strided: input block c -> own buffer block c (c != r), input block r -> output block r;
//    start barrier; output block p <- block r of rank p's buffer; end barrier. Symmetric buffer:
//    num_ranks * count. Input may equal output (each slice reads its input before the start barrier
//    and writes its output after it).
// Copies are exact bits. Preconditions (the launchers check them): count <= stride; the same count,
// stride and grid on every rank; symmetric buffers of the sizes above; input and output disjoint
// from this rank's symmetric buffer; AllGather and ReduceScatter inputs disjoint from their outputs.
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../core/error.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/checks.hpp"
#include "../kernel/launch.hpp"
#include "../kernel/layout.hpp"
#include "../kernel/vector_io.hpp"
#include "launch_config.hpp"
#include "op_allreduce.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// T: any element type whose size divides 16. Group-collective; false if a barrier timed out.
template <class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool allgather_strided(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                         T* output, std::size_t count, std::size_t stride, int block, int num_blocks) {
  static_assert(16 % sizeof(T) == 0, "dda::allgather_strided: sizeof(T) must divide 16");
  if (count == 0) return true;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  kernel::copy_owned(l, tid, all, input, output + static_cast<std::size_t>(r) * stride, t.data[r]);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  for (int s = 1; s < n; ++s) {
    const int p = r + s < n ? r + s : r + s - n;
    kernel::copy_owned(l, tid, all, static_cast<const T*>(t.data[p]), output + static_cast<std::size_t>(p) * stride);
  }
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// ReduceOp: a core op functor value (op_sum, op_min, op_max, op_product, op_avg, op_premul_sum).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool reduce_scatter_strided(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                              T* output, std::size_t count, std::size_t stride, int block,
                                              int num_blocks, ReduceOp op) {
  static_assert(detail::op_takes<ReduceOp, T>(), "dda::reduce_scatter_strided: T must be reducible "
                                                 "(premul_sum: floating types)");
  if (count == 0) return true;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  T* own = t.data[r];
  for (int c = 0; c < n; ++c)
    if (c != r)
      kernel::copy_owned(l, tid, all, input + static_cast<std::size_t>(c) * stride, own + static_cast<std::size_t>(c) * count);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  kernel::peer_ptrs<T, MaxRanks> src(t);
  for (int p = 0; p < MaxRanks; ++p)
    if (p < n)
      src.p[p] = p == r ? input + static_cast<std::size_t>(r) * stride : src.p[p] + static_cast<std::size_t>(r) * count;
  const bool src_aligned = (static_cast<std::size_t>(r) * count * sizeof(T)) % 16 == 0 &&
                           gpu::is_aligned(input + static_cast<std::size_t>(r) * stride, 16);
  detail::reduce_owned(l, tid, all, src, src_aligned, output, static_cast<T*>(nullptr), op);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// T: any element type whose size divides 16. Input may equal output.
template <class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool alltoall_strided(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                        T* output, std::size_t count, std::size_t stride, int block, int num_blocks) {
  static_assert(16 % sizeof(T) == 0, "dda::alltoall_strided: sizeof(T) must divide 16");
  if (count == 0) return true;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  T* own = t.data[r];
  const std::size_t mine = static_cast<std::size_t>(r) * stride;
  for (int c = 0; c < n; ++c)
    if (c != r)
      kernel::copy_owned(l, tid, all, input + static_cast<std::size_t>(c) * stride, own + static_cast<std::size_t>(c) * count);
  if (input != output) kernel::copy_owned(l, tid, all, input + mine, output + mine);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  for (int s = 1; s < n; ++s) {
    const int p = r + s < n ? r + s : r + s - n;
    kernel::copy_owned(l, tid, all, static_cast<const T*>(t.data[p]) + static_cast<std::size_t>(r) * count,
                       output + static_cast<std::size_t>(p) * stride);
  }
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

// Uneven AlltoAll (torch's all_to_all_single with split sizes), one slice [off, off + k) of every
// block: rank r sends in_len[c] elements from input + in_off[c] to rank c and receives out_len[p]
// elements from rank p at output + out_off[p]; out_len[p] on rank r must equal rank p's in_len[r]
// (the layouts that pair block b of the two ranks are then the same). The symmetric buffer holds
// num_ranks slots of k elements (slot c: what this rank sends to c). Input and output disjoint.
template <int MaxRanks>
struct uneven_splits {
  std::size_t in_off[MaxRanks], in_len[MaxRanks], out_off[MaxRanks], out_len[MaxRanks];
};
template <class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE bool alltoallv_slice(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                       T* output, const uneven_splits<MaxRanks>& sp, std::size_t off, std::size_t k,
                                       int block, int num_blocks) {
  static_assert(16 % sizeof(T) == 0, "dda::alltoallv_slice: sizeof(T) must divide 16");
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  // Elements of a block of `len` in this slice.
  const auto part = [&](std::size_t len) { return len > off ? (len - off < k ? len - off : k) : std::size_t{0}; };
  T* own = t.data[r];
  for (int c = 0; c < n; ++c) {
    const std::size_t m = part(sp.in_len[c]);
    if (m == 0) continue;
    const kernel::layout<T> l(m, g.size(), block, num_blocks);
    const T* src = input + sp.in_off[c] + off;
    if (c == r) kernel::copy_owned(l, tid, kernel::tile_range{0, l.tiles}, src, output + sp.out_off[r] + off);
    else kernel::copy_owned(l, tid, kernel::tile_range{0, l.tiles}, src, own + static_cast<std::size_t>(c) * k);
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  for (int s = 1; s < n; ++s) {
    const int p = r + s < n ? r + s : r + s - n;
    const std::size_t m = part(sp.out_len[p]);
    if (m == 0) continue;
    const kernel::layout<T> l(m, g.size(), block, num_blocks);
    kernel::copy_owned(l, tid, kernel::tile_range{0, l.tiles},
                       static_cast<const T*>(t.data[p]) + static_cast<std::size_t>(r) * k, output + sp.out_off[p] + off);
  }
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {

template <class T, int MaxRanks>
struct alltoallv_body {
  const T* input;
  T* output;
  uneven_splits<MaxRanks> splits;
  std::size_t off, k;
  template <class Group>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    return alltoallv_slice(g, t, input, output, splits, off, k, block, num_blocks);
  }
};

enum class strided_kind { allgather, reduce_scatter, alltoall };

template <strided_kind Kind, class ReduceOp, class T>
struct strided_body {
  const T* input;
  T* output;
  std::size_t count;
  std::size_t stride;
  ReduceOp op;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    if constexpr (Kind == strided_kind::allgather)
      return allgather_strided(g, t, input, output, count, stride, block, num_blocks);
    else if constexpr (Kind == strided_kind::reduce_scatter)
      return reduce_scatter_strided(g, t, input, output, count, stride, block, num_blocks, resolve_op<T>(op));
    else
      return alltoall_strided(g, t, input, output, count, stride, block, num_blocks);
  }
};

// The host side of the three (a table by value): checks, grid (the one-shot shape for count
// elements), launch.
template <strided_kind Kind, class T, int MaxRanks>
inline void strided(const char* fn, const core::peer_table<T, MaxRanks>& t, const T* input, T* output,
                    std::size_t count, std::size_t stride, const reduce_spec& spec, gpu::stream_t stream,
                    int num_blocks) {
  const std::string who = fn;
  const int n = t.num_ranks();
  kernel::check_num_ranks(who, n, MaxRanks);
  kernel::check_num_blocks(who, num_blocks);
  if (count > stride)
    throw error(errc::invalid_argument, who + ": count = " + std::to_string(count) + " exceeds stride = " +
                                            std::to_string(stride) + " (the blocks would overlap)");
  if (Kind == strided_kind::reduce_scatter) kernel::check_spec<T>(who, spec);
  const std::size_t nn = static_cast<std::size_t>(n);
  kernel::check_count<T>(who, stride, nn);
  const std::size_t in_elems = Kind == strided_kind::allgather ? count : (nn - 1) * stride + count;
  const std::size_t out_elems = Kind == strided_kind::reduce_scatter ? count : (nn - 1) * stride + count;
  const std::size_t ws_bytes = (Kind == strided_kind::allgather ? count : nn * count) * sizeof(T);
  const launch_config cfg = one_shot_launch_config();
  const kernel::grid_shape shape{num_blocks > 0 ? num_blocks : kernel::blocks_for_elems<T>(count, cfg.threads, cfg.flat_max_blocks),
                                 cfg.threads};
  kernel::check_table(who, t, count, ws_bytes, "the slices of every block", shape.blocks);
  if (count == 0) return;
  kernel::check_in_out<T>(who, input, in_elems, output, out_elems, Kind == strided_kind::alltoall);
  const T* own = t.data[t.rank()];
  if (kernel::overlaps(input, in_elems * sizeof(T), own, t.capacity_bytes) ||
      kernel::overlaps(output, out_elems * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": input or output overlaps this rank's symmetric buffer (peers read it)");
  const kernel::table_need need{n, ws_bytes};
  if constexpr (Kind == strided_kind::reduce_scatter) {
    with_any_op(reduce_spec{core::effective_op<T>(spec.op), spec.factor, spec.factor_device}, [&](auto op) {
      using Op = decltype(op);
      if constexpr (op_takes<Op, T>())
        kernel::launch(who, t, need, shape, strided_body<Kind, Op, T>{input, output, count, stride, op}, stream);
    });
  } else {
    kernel::launch(who, t, need, shape, strided_body<Kind, core::op_sum, T>{input, output, count, stride, {}}, stream);
  }
}

}  // namespace detail

// AllGather slice for this rank: output[p * stride + i] = rank p's input[i], i < count.
template <class T, int MaxRanks>
void allgather_strided(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
                       std::size_t stride, gpu::stream_t stream = {}, int num_blocks = 0) {
  detail::strided<detail::strided_kind::allgather>("rcclx::dda::allgather_strided", table, input, output, count,
                                                   stride, reduce_spec{}, stream, num_blocks);
}

// ReduceScatter slice for this rank r: output[i] = op over ranks p of input_p[r * stride + i], i < count.
template <class T, int MaxRanks>
void reduce_scatter_strided(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
                            std::size_t stride, const reduce_spec& op, gpu::stream_t stream = {}, int num_blocks = 0) {
  detail::strided<detail::strided_kind::reduce_scatter>("rcclx::dda::reduce_scatter_strided", table, input, output,
                                                        count, stride, op, stream, num_blocks);
}

// AlltoAll slice for this rank r: output[p * stride + i] = input_p[r * stride + i], i < count.
template <class T, int MaxRanks>
void alltoall_strided(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
                      std::size_t stride, gpu::stream_t stream = {}, int num_blocks = 0) {
  detail::strided<detail::strided_kind::alltoall>("rcclx::dda::alltoall_strided", table, input, output, count, stride,
                                                  reduce_spec{}, stream, num_blocks);
}

// The uneven AlltoAll for this rank: every slice of `k` elements (k a multiple of 16 / sizeof(T),
// num_ranks * k * sizeof(T) <= the capacity) up to the largest block of any rank, `max_len` (the same
// on every rank; the caller agrees on it and on the splits' consistency, as host::communicator does).
template <class T, int MaxRanks>
void alltoallv(const core::peer_table<T, MaxRanks>& table, const T* input, T* output,
               const uneven_splits<MaxRanks>& splits, std::size_t max_len, std::size_t k, gpu::stream_t stream = {}) {
  const std::string who = "rcclx::dda::alltoallv";
  const int n = table.num_ranks();
  kernel::check_num_ranks(who, n, MaxRanks);
  if (k == 0 || k % (16 / sizeof(T)) != 0)
    throw error(errc::invalid_argument, who + ": slice k = " + std::to_string(k) + " is not a positive multiple of " +
                                            std::to_string(16 / sizeof(T)) + " elements");
  const launch_config cfg = one_shot_launch_config();
  const std::size_t per_launch = max_len < k ? max_len : k;
  const kernel::grid_shape shape{kernel::blocks_for_elems<T>(per_launch, cfg.threads, cfg.flat_max_blocks), cfg.threads};
  kernel::check_table(who, table, per_launch, static_cast<std::size_t>(n) * k * sizeof(T), "num_ranks slots of k",
                      shape.blocks);
  for (std::size_t off = 0; off < max_len; off += k)
    kernel::launch(who, table, kernel::table_need{n, static_cast<std::size_t>(n) * k * sizeof(T)}, shape,
                   detail::alltoallv_body<T, MaxRanks>{input, output, splits, off, k}, stream);
}

}  // namespace dda
RCCLX_NAMESPACE_END
