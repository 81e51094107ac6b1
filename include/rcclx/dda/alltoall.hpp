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
#include "../core/peer_table.hpp"
#include "../mesh/schedule.hpp"
#include "allreduce.hpp"
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
  const detail::layout<T> l(c_elems, g.size(), block, num_blocks);
  const detail::tile_range all{0, l.tiles};
  T* own = t.data[r];
  for (int c = 0; c < n; ++c) {
    const std::size_t off = static_cast<std::size_t>(c) * c_elems;
    if (c == r) detail::copy_owned(l, tid, all, input + off, output + off);
    else if (input != own) detail::copy_owned(l, tid, all, input + off, own + off);
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  detail::gather_list<T, MaxRanks> list{};
  list.n = n;
  RCCLX_DETAIL_DDA_UNROLL
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

template <class Schedule, class T>
struct alltoall_body {
  const T* input;
  T* output;
  std::size_t count;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    return flat_alltoall<Schedule>(g, t, input, output, count, block, num_blocks);
  }
};

template <class T>
inline void validate_alltoall(const std::string& who, int n, int max_ranks, const T* input, T* output,
                              std::size_t count, int num_blocks) {
  check_num_ranks(who, n, max_ranks);
  check_num_blocks(who, num_blocks);
  check_count<T>(who, count);
  check_divisible(who, count, n);
  if (count == 0) return;
  check_in_out<T>(who, input, count, output, count, true);
}

template <class T, int MaxRanks>
inline void validate_alltoall_table(const std::string& who, const core::peer_table<T, MaxRanks>& t, const T* input,
                                    const T* output, std::size_t count, int num_blocks) {
  check_table_buffers(who, t);
  check_capacity(who, count, count * sizeof(T), t.capacity_bytes, "the input");
  check_blocks_fit(who, num_blocks, t.signals);
  if (count == 0) return;
  const T* own = t.data[t.rank()];
  if (input != own && overlaps(input, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": input overlaps this rank's symmetric buffer without being it");
  if (overlaps(output, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": output overlaps this rank's symmetric buffer (peers read it)");
}

}  // namespace detail

// Blocks per rank the launcher uses (identical on every rank).
template <class T>
RCCLX_HOST_DEVICE constexpr int alltoall_blocks(std::size_t count, int num_ranks,
                                                const launch_config& cfg = default_launch_config()) {
  return detail::blocks_for_elems<T>(count / static_cast<std::size_t>(num_ranks), cfg.threads, cfg.flat_max_blocks);
}

// AlltoAll for this rank: output[p * C + i] = input of rank p at [r * C + i], C = count / num_ranks.
// Errors as dda::allgather, plus count % num_ranks != 0 (invalid_argument).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void alltoall(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
              gpu::stream_t stream = {}, int num_blocks = 0) {
  const std::string who = "rcclx::dda::alltoall";
  const int n = table.num_ranks();
  detail::validate_alltoall(who, n, MaxRanks, input, output, count, num_blocks);
  detail::check_schedule<Schedule>(who, n);
  const launch_config cfg = default_launch_config();
  const int nb = num_blocks > 0 ? num_blocks : alltoall_blocks<T>(count, n, cfg);
  detail::validate_alltoall_table(who, table, input, output, count, nb);
  if (count == 0) return;
  detail::launch_body<T, MaxRanks>(who.c_str(), table, n, count * sizeof(T),
                                   detail::alltoall_body<Schedule, T>{input, output, count}, stream, nb, cfg.threads);
}

// The same with the table in device memory (the kernel checks rank count, capacity and grid).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void alltoall(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
              std::size_t count, gpu::stream_t stream = {}, int num_blocks = 0) {
  const std::string who = "rcclx::dda::alltoall(device table)";
  if (!device_table) throw error(errc::invalid_argument, who + ": device_table is null");
  detail::validate_alltoall(who, num_ranks, MaxRanks, input, output, count, num_blocks);
  detail::check_schedule<Schedule>(who, num_ranks);
  const launch_config cfg = default_launch_config();
  const int nb = num_blocks > 0 ? num_blocks : alltoall_blocks<T>(count, num_ranks, cfg);
#if RCCLX_BACKEND_HOST
  if (device_table->num_ranks() != num_ranks)
    throw error(errc::mismatch, who + ": num_ranks = " + std::to_string(num_ranks) + " but the table has " +
                                    std::to_string(device_table->num_ranks()));
  detail::validate_alltoall_table(who, *device_table, input, output, count, nb);
#endif
  if (count == 0) return;
  detail::launch_body<T, MaxRanks>(who.c_str(), device_table, num_ranks, count * sizeof(T),
                                   detail::alltoall_body<Schedule, T>{input, output, count}, stream, nb, cfg.threads);
}

}  // namespace dda
RCCLX_NAMESPACE_END
