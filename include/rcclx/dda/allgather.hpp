// rcclx/dda/allgather.hpp: AllGather by direct loads (one-shot, full precision): the device
// template for your own kernels and the host launcher for one rank.
//
//   // in a kernel launched with the same grid on every rank (output: num_ranks * count elements):
//   bool ok = rcclx::dda::flat_allgather(rcclx::gpu::block_group{}, table, in, out, count, blockIdx.x, gridDim.x);
//   if (!ok) return;   // a peer never arrived: the error is recorded in table.signals, leave
//   // host, rank r (table: every rank's symmetric buffer, capacity >= count * sizeof(T)):
//   rcclx::dda::allgather(table, in, out, count, stream);
//
// Algorithm (per block b, for the tiles of `count` elements it owns, see dda/detail/tiles.hpp):
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
#include "../core/peer_table.hpp"
#include "../mesh/schedule.hpp"
#include "allreduce.hpp"
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
  const detail::layout<T> l(count, g.size(), block, num_blocks);
  const detail::tile_range all{0, l.tiles};
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  T* own = t.data[r];
  detail::copy_owned2(l, tid, all, input, output + static_cast<std::size_t>(r) * count, input != own ? own : nullptr);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  detail::gather_list<T, MaxRanks> list{};
  list.n = n;
  RCCLX_DETAIL_DDA_UNROLL
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

template <class Schedule, class T>
struct allgather_body {
  const T* input;
  T* output;
  std::size_t count;
  template <class Group, int MaxRanks>
  RCCLX_HOST_DEVICE bool operator()(const Group& g, const core::peer_table<T, MaxRanks>& t, int block,
                                    int num_blocks) const {
    return flat_allgather<Schedule>(g, t, input, output, count, block, num_blocks);
  }
};

template <class T>
inline void validate_allgather(const std::string& who, int n, int max_ranks, const T* input, T* output,
                               std::size_t count, int num_blocks) {
  check_num_ranks(who, n, max_ranks);
  check_num_blocks(who, num_blocks);
  check_count<T>(who, count, static_cast<std::size_t>(n));
  if (count == 0) return;
  check_in_out<T>(who, input, count, output, count * static_cast<std::size_t>(n), false);
}

template <class T, int MaxRanks>
inline void validate_allgather_table(const std::string& who, const core::peer_table<T, MaxRanks>& t, const T* input,
                                     const T* output, std::size_t count, int num_blocks) {
  check_table_buffers(who, t);
  check_capacity(who, count, count * sizeof(T), t.capacity_bytes, "the input");
  check_blocks_fit(who, num_blocks, t.signals);
  if (count == 0) return;
  const T* own = t.data[t.rank()];
  if (input != own && overlaps(input, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": input overlaps this rank's symmetric buffer without being it");
  if (overlaps(output, count * sizeof(T) * static_cast<std::size_t>(t.num_ranks()), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": output overlaps this rank's symmetric buffer (peers read it)");
}

}  // namespace detail

// Blocks per rank the launcher uses for `count` elements (identical on every rank).
template <class T>
RCCLX_HOST_DEVICE constexpr int allgather_blocks(std::size_t count, const launch_config& cfg = default_launch_config()) {
  return detail::blocks_for_elems<T>(count, cfg.threads, cfg.flat_max_blocks);
}

// AllGather for this rank: output[p * count + i] = input of rank p, element i, for every rank p.
// input may be the rank's symmetric buffer (no copy). Throws rcclx::error before launching on
// invalid arguments: num_ranks outside [2, MaxRanks], capacity below count * sizeof(T), null or
// misaligned pointers, overlaps, num_blocks above the pads' max_blocks (invalid_argument /
// misaligned), a Schedule that does not support num_ranks (unsupported).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void allgather(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
               gpu::stream_t stream = {}, int num_blocks = 0) {
  const std::string who = "rcclx::dda::allgather";
  const int n = table.num_ranks();
  detail::validate_allgather(who, n, MaxRanks, input, output, count, num_blocks);
  detail::check_schedule<Schedule>(who, n);
  const launch_config cfg = default_launch_config();
  const int nb = num_blocks > 0 ? num_blocks : allgather_blocks<T>(count, cfg);
  detail::validate_allgather_table(who, table, input, output, count, nb);
  if (count == 0) return;
  detail::launch_body<T, MaxRanks>(who.c_str(), table, n, count * sizeof(T),
                                   detail::allgather_body<Schedule, T>{input, output, count}, stream, nb, cfg.threads);
}

// The same with the table in device memory (the kernel checks rank count, capacity and grid).
template <class Schedule = mesh::default_schedule, class T, int MaxRanks>
void allgather(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
               std::size_t count, gpu::stream_t stream = {}, int num_blocks = 0) {
  const std::string who = "rcclx::dda::allgather(device table)";
  if (!device_table) throw error(errc::invalid_argument, who + ": device_table is null");
  detail::validate_allgather(who, num_ranks, MaxRanks, input, output, count, num_blocks);
  detail::check_schedule<Schedule>(who, num_ranks);
  const launch_config cfg = default_launch_config();
  const int nb = num_blocks > 0 ? num_blocks : allgather_blocks<T>(count, cfg);
#if RCCLX_BACKEND_HOST
  if (device_table->num_ranks() != num_ranks)
    throw error(errc::mismatch, who + ": num_ranks = " + std::to_string(num_ranks) + " but the table has " +
                                    std::to_string(device_table->num_ranks()));
  detail::validate_allgather_table(who, *device_table, input, output, count, nb);
#endif
  if (count == 0) return;
  detail::launch_body<T, MaxRanks>(who.c_str(), device_table, num_ranks, count * sizeof(T),
                                   detail::allgather_body<Schedule, T>{input, output, count}, stream, nb, cfg.threads);
}

}  // namespace dda
RCCLX_NAMESPACE_END
