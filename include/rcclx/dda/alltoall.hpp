// rcclx/dda/alltoall.hpp: AlltoAll by direct loads (one-shot, full precision): the device template
// for your own kernels and the host launcher for one rank.
//
//   // count = num_ranks * block elements; block i of rank r lands at block r of rank i:
//   bool ok = rcclx::dda::flat_alltoall(rcclx::gpu::block_group{}, table, in, out, count, blockIdx.x, gridDim.x);
//   rcclx::dda::alltoall(table, in, out, count, stream);      // host launcher for this rank
//
// Algorithm, C = count / N elements per block (tiles of C elements, tile t owned by block t % nb):
//   1. copy input block c into own symmetric buffer block c for c != r (skipped when the input is
//      the buffer), and input block r straight into output block r
//   2. start barrier
//   3. for s = 1..N-1 (mesh order, Schedule): output block p = Schedule::peer(r, s) <- block r of
//      rank p's buffer; the N-1 loads of a vector are all in flight before its stores
//   4. end barrier
// Steps: 2 barriers, 1 data phase. Traffic per rank for S = count * sizeof(T): reads S + (N-1)S/N,
// writes (N-1)S/N (copy) + S; (N-1)S/N cross to peers. Exact bitwise copies.
//
// Preconditions (checked by the launcher): count % N == 0 and the same on every rank, count <=
// table.capacity(); input and output aligned to sizeof(T), equal (in place) or disjoint; input is
// own symmetric buffer or disjoint from it; output disjoint from it. C * sizeof(T) need not be a
// multiple of 16: unaligned blocks are copied element by element.
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../mesh/schedule.hpp"
#include "detail/direct.hpp"
#include "detail/launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// T: any element type of 1, 2, 4, 8 or 16 bytes. count must be a multiple of the rank count.
// In place (input == output) is allowed: each thread reads every position it later writes first.
template <class Schedule = mesh::default_schedule, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flat_alltoall(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                     T* output, std::size_t count, int block, int num_blocks) {
  static_assert(16 % sizeof(T) == 0, "dda::flat_alltoall: sizeof(T) must divide 16");
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  const std::size_t c_elems = count / static_cast<std::size_t>(n);
  if (c_elems == 0) return true;
  const kernel::layout<T> l(c_elems, g.size(), block, num_blocks);
  const kernel::tile_range all{0, l.tiles};
  T* own = t.data[r];
  for (int c = 0; c < n; ++c) {
    const std::size_t off = static_cast<std::size_t>(c) * c_elems;
    if (c == r) kernel::copy_owned(l, tid, all, input + off, output + off);
    else if (input != own) kernel::copy_owned(l, tid, all, input + off, own + off);
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  detail::gather_list<T, MaxRanks> list{};
  list.n = n;
  RCCLX_DETAIL_KERNEL_UNROLL
  for (int s = 0; s < MaxRanks; ++s) {  // unrolled: constant indices, the list stays in registers
    if (s < n) {
      const mesh::step st = mesh::all_to_all<Schedule>(r, s, n);
      list.src[s] = st.peer == r ? nullptr : t.data[st.peer] + static_cast<std::size_t>(st.chunk) * c_elems;
      list.dst[s] = output + static_cast<std::size_t>(st.peer) * c_elems;  // own block: copied in step 1
    }
  }
  const bool chunk_aligned = (c_elems * sizeof(T)) % 16 == 0;
  detail::gather_owned(l, tid, all, list, chunk_aligned, chunk_aligned && gpu::is_aligned(output, 16));
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {
template <class Op, class Schedule, class T, int MaxRanks>
using alltoall_fn = kernel::device_fn<&flat_alltoall<Schedule, T, MaxRanks, kernel::launch_group>>;
}  // namespace detail

// Blocks per rank the launcher uses (identical on every rank).
template <class T>
RCCLX_HOST_DEVICE constexpr int alltoall_blocks(std::size_t count, int num_ranks,
                                                const launch_config& cfg = one_shot_launch_config()) {
  return detail::one_shot_blocks<T>(kernel::io_kind::exchange, count, num_ranks, cfg);
}

// AlltoAll for this rank: output[p * C + i] = input of rank p at [r * C + i], C = count / num_ranks.
// Errors as dda::allgather, plus count % num_ranks != 0 (invalid_argument).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void alltoall(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
              gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::one_shot<kernel::io_kind::exchange, detail::alltoall_fn, Schedule>>(
      "rcclx::dda::alltoall", table, input, output, count, reduce_op::sum, stream, num_blocks);
}

// The same with the table in device memory (the kernel checks rank count, capacity and grid).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void alltoall(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
              std::size_t count, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::one_shot<kernel::io_kind::exchange, detail::alltoall_fn, Schedule>>(
      "rcclx::dda::alltoall", kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count,
      reduce_op::sum, stream, num_blocks);
}

}  // namespace dda
RCCLX_NAMESPACE_END
