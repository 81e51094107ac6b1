// rcclx/dda/allgather.hpp: AllGather by direct loads (one-shot, full precision): the device
// template for your own kernels and the host launcher for one rank.
//
//   // in a kernel launched with the same grid on every rank (output: num_ranks * count elements):
//   bool ok = rcclx::dda::flat_allgather(rcclx::gpu::block_group{}, table, in, out, count, blockIdx.x, gridDim.x);
//   if (!ok) return;   // a peer never arrived: the error is recorded in table.signals, leave
//   // host, rank r (table: every rank's symmetric buffer, capacity >= count * sizeof(T)):
//   rcclx::dda::allgather(table, in, out, count, stream);
//
// Algorithm (per block b, for the tiles of `count` elements it owns, see kernel/layout.hpp):
//   1. copy own input into own symmetric buffer (skipped when the input is that buffer) and into
//      output block r, in one pass
//   2. start barrier
//   3. for s = 1..N-1 (mesh order, Schedule): output block p = Schedule::peer(r, s) <- rank p's
//      buffer; the N-1 loads of a vector are all in flight before its stores
//   4. end barrier: nobody overwrites a buffer a peer is still reading
// Steps: 2 barriers, 1 data phase. Traffic per rank for S = count * sizeof(T): reads S + (N-1)S,
// writes S (symmetric copy; none when the input is the buffer) + N*S; (N-1)S cross to peers.
// The output is the inputs' exact bits (bitwise copies), the same on every rank.
//
// Preconditions (the launcher checks them): same count, group size and num_blocks on every rank;
// count <= table.capacity(); symmetric buffers 16-byte aligned; input and output aligned to
// sizeof(T) and disjoint; input is own symmetric buffer or disjoint from it; output disjoint from it.
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../mesh/schedule.hpp"
#include "detail/direct.hpp"
#include "detail/launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// T: any element type of 1, 2, 4, 8 or 16 bytes (a copy). Group-collective. Returns false if a
// barrier timed out (the error is recorded; the caller must leave the kernel).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flat_allgather(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                      T* output, std::size_t count, int block, int num_blocks) {
  static_assert(16 % sizeof(T) == 0, "dda::flat_allgather: sizeof(T) must divide 16");
  if (count == 0) return true;
  const kernel::layout<T> l(count, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  T* own = t.data[r];
  kernel::copy_owned(l, tid, all, input, output + static_cast<std::size_t>(r) * count, input != own ? own : nullptr);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  detail::gather_list<T, MaxRanks> list{};
  list.n = n;
  RCCLX_DETAIL_KERNEL_UNROLL
  for (int s = 0; s < MaxRanks; ++s) {  // unrolled: constant indices, the list stays in registers
    if (s < n) {
      const int p = mesh::all_gather<Schedule>(r, s, n).peer;
      list.src[s] = p == r ? nullptr : t.data[p];  // own block: written in step 1
      list.dst[s] = output + static_cast<std::size_t>(p) * count;
    }
  }
  const bool dst_aligned = gpu::is_aligned(output, 16) && (count * sizeof(T)) % 16 == 0;
  detail::gather_owned(l, tid, all, list, true, dst_aligned);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {
template <class Op, class Schedule, class T, int MaxRanks>
using allgather_fn = kernel::device_fn<&flat_allgather<Schedule, T, MaxRanks, kernel::launch_group>>;
}  // namespace detail

// Blocks per rank the launcher uses for `count` elements (identical on every rank).
template <class T>
RCCLX_HOST_DEVICE constexpr int allgather_blocks(std::size_t count, const launch_config& cfg = one_shot_launch_config()) {
  return detail::one_shot_blocks<T>(kernel::io_kind::gather, count, 2, cfg);
}

// AllGather for this rank: output[p * count + i] = input of rank p, element i, for every rank p.
// input may be the rank's symmetric buffer (no copy). Throws rcclx::error before launching on
// invalid arguments: num_ranks outside [2, MaxRanks], capacity below count * sizeof(T), null or
// misaligned pointers, overlaps, num_blocks above the pads' max_blocks (invalid_argument /
// misaligned), a Schedule that does not support num_ranks (unsupported).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void allgather(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
               gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::one_shot<kernel::io_kind::gather, detail::allgather_fn, Schedule>>(
      "rcclx::dda::allgather", table, input, output, count, reduce_op::sum, stream, num_blocks);
}

// The same with the table in device memory (the kernel checks rank count, capacity and grid).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void allgather(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
               std::size_t count, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::one_shot<kernel::io_kind::gather, detail::allgather_fn, Schedule>>(
      "rcclx::dda::allgather", kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count,
      reduce_op::sum, stream, num_blocks);
}

}  // namespace dda
RCCLX_NAMESPACE_END
