// rcclx/lpc/allgather.hpp: low-precision AllGather: each rank's input crosses the wire once as FP8
// with block scales and is dequantized by every receiver. Device template + host launcher.
//
//   // output: num_ranks * count elements; block p = rank p's input after one FP8 round trip
//   bool ok = rcclx::lpc::fp8_allgather(rcclx::gpu::block_group{}, table, in, out, count, blockIdx.x, gridDim.x);
//   rcclx::lpc::allgather(table, in, out, count, stream);    // buffer: lpc::workspace_bytes<>(collective::allgather, count, N)
//
// Algorithm (units, tiles and block ownership as in lpc/detail/units.hpp):
//   1. quantize the own input into own slot 0 and write its dequantized copy into output block r
//      (from registers: the bits every peer will reconstruct)
//   2. start barrier
//   3. for s = 1..N-1 (Schedule order) output block p = Schedule::peer(r, s) <- slot 0 of rank p,
//      dequantized straight into the output (the N-1 loads of a unit in flight together)
//   4. end barrier
// Every output block is the dequantized FP8 form of its rank's input, the own block too: all ranks
// hold the same bits. Steps: 2 barriers, 2 data phases. Traffic per rank, S = count * sizeof(T),
// Q = count * (1 + scale bytes / BlockSize): reads S + (N-1)Q, writes Q + N*S; (N-1)Q cross to
// peers (plain: (N-1)S). Error: one quantization per element (docs/numerics.md).
//
// Preconditions (checked by the launcher): as lpc::allreduce, except that input and output must be
// disjoint (the output is N times larger).
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../core/peer_table.hpp"
#include "../mesh/schedule.hpp"
#include "config.hpp"
#include "detail/launch.hpp"
#include "detail/units.hpp"
#include "workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace lpc {

// T: float or rcclx::bf16. Group-collective; false if a barrier timed out (leave the kernel).
template <class Config = default_config, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fp8_allgather(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                     T* output, std::size_t count, int block, int num_blocks) {
  static_assert(is_config_v<Config>, "rcclx::lpc::fp8_allgather: Config must be an rcclx::lpc::config");
  static_assert(is_element_v<T>, "rcclx::lpc::fp8_allgather: T must be float or rcclx::bf16");
  if (count == 0) return true;
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  const detail::slots<Config> sl(t.capacity_bytes, 1);
  const detail::unit_tiles ut(g.size(), block, num_blocks);
  void* own = t.data[r];
  const bool out_vec = gpu::is_aligned(output, 16) && (count * sizeof(T)) % 16 == 0;
  detail::quantize_chunk<Config, detail::quantize_unroll<Config, T>()>(
      tid, ut, input, count, gpu::is_aligned(input, 16), sl.payload(own, 0), sl.scales(own, 0),
      output + static_cast<std::size_t>(r) * count, out_vec);
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  const auto list = detail::make_gather_entries<MaxRanks>(
      n, r, [&](int s) { return mesh::all_gather<typename Config::schedule>(r, s, n).peer; },
      [&](int p, int) -> const unsigned char* { return sl.payload(t.data[p], 0); });
  detail::gather_chunks<Config>(tid, ut, list, Config::layout::scales_offset(sl.elems), count, output, count,
                                count * static_cast<std::size_t>(n), out_vec);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {
template <class Op, class Config, class T, int MaxRanks>
using allgather_fn = kernel::device_fn<&fp8_allgather<Config, T, MaxRanks, kernel::launch_group>>;
}  // namespace detail

// Low-precision AllGather for this rank: output[p * count + i] = FP8 round trip of rank p's input[i].
// Errors as lpc::allreduce (input and output must be disjoint here).
template <class Config = default_config, class T, int MaxRanks>
void allgather(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
               gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::allgather, detail::allgather_fn, Config>>(
      "rcclx::lpc::allgather", table, input, output, count, reduce_op::sum, stream, num_blocks);
}

// The same with the table in device memory.
template <class Config = default_config, class T, int MaxRanks>
void allgather(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
               std::size_t count, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::allgather, detail::allgather_fn, Config>>(
      "rcclx::lpc::allgather", kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count, reduce_op::sum,
      stream, num_blocks);
}

}  // namespace lpc
RCCLX_NAMESPACE_END
