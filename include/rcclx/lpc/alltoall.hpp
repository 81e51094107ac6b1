// rcclx/lpc/alltoall.hpp: low-precision AlltoAll: each block crosses the wire once as FP8 with
// block scales. Device template + host launcher.
//
//   // count = num_ranks * C; block i of rank r lands at block r of rank i (the own block exactly)
//   bool ok = rcclx::lpc::fp8_alltoall(rcclx::gpu::block_group{}, table, in, out, count, blockIdx.x, gridDim.x);
//   rcclx::lpc::alltoall(table, in, out, count, stream);     // buffer: lpc::workspace_bytes<>(collective::alltoall, count, N)
//
// Algorithm, C = count / N (quantization blocks start at each block's first element; the last one
// of a block may be partial, padded logically with zeros):
//   1. quantize input block c into own slot c for c != r; copy input block r to output block r
//      (it never leaves the rank: exact)
//   2. start barrier
//   3. for s = 1..N-1 (Schedule order) output block p = Schedule::peer(r, s) <- slot r of rank p,
//      dequantized straight into the output (the N-1 loads of a unit in flight together)
//   4. end barrier
// Steps: 2 barriers, 2 data phases. Traffic per rank, S = count * sizeof(T), Q = count * (1 +
// scale bytes / BlockSize): reads S + (N-1)Q/N, writes (N-1)Q/N + S; (N-1)Q/N cross to peers
// (plain: (N-1)S/N). Error: one quantization per received element (docs/numerics.md).
//
// Preconditions (checked by the launcher): as lpc::allreduce, plus count % N == 0. Input and output
// may be equal (in place). C * sizeof(T) need not be a multiple of 16 (element-wise fallback).
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../core/peer_table.hpp"
#include "../kernel/layout.hpp"
#include "../kernel/vector_io.hpp"
#include "../mesh/schedule.hpp"
#include "config.hpp"
#include "detail/launch.hpp"
#include "detail/units.hpp"
#include "workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace lpc {

// T: float or rcclx::bf16; count a multiple of the rank count. Group-collective; false if a barrier
// timed out (leave the kernel).
template <class Config = default_config, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fp8_alltoall(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                    T* output, std::size_t count, int block, int num_blocks) {
  static_assert(is_config_v<Config>, "rcclx::lpc::fp8_alltoall: Config must be an rcclx::lpc::config");
  static_assert(is_element_v<T>, "rcclx::lpc::fp8_alltoall: T must be float or rcclx::bf16");
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  const std::size_t c_elems = count / static_cast<std::size_t>(n);
  if (c_elems == 0) return true;
  const detail::slots<Config> sl(t.capacity_bytes, n);
  const detail::unit_tiles ut(g.size(), block, num_blocks);
  void* own = t.data[r];
  const bool chunk_vec = (c_elems * sizeof(T)) % 16 == 0;
  const bool in_vec = chunk_vec && gpu::is_aligned(input, 16), out_vec = chunk_vec && gpu::is_aligned(output, 16);
  for (int c = 0; c < n; ++c) {
    const std::size_t off = static_cast<std::size_t>(c) * c_elems;
    if (c == r) {
      // Local: any partition will do (no peer reads it); in place it copies a block onto itself.
      const kernel::layout<T> l(c_elems, g.size(), block, num_blocks);
      kernel::copy_owned(l, tid, kernel::tile_range{0, l.tiles}, input + off, output + off);
    } else {
      detail::quantize_chunk<Config, detail::quantize_unroll<Config, T>()>(
          tid, ut, input + off, c_elems, in_vec, sl.payload(own, c), sl.scales(own, c), static_cast<T*>(nullptr), false);
    }
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  const auto list = detail::make_gather_entries<MaxRanks>(
      n, r, [&](int s) { return mesh::all_to_all<typename Config::schedule>(r, s, n).peer; },
      [&](int p, int s) -> const unsigned char* {
        return sl.payload(t.data[p], mesh::all_to_all<typename Config::schedule>(r, s, n).chunk);
      });
  detail::gather_chunks<Config>(tid, ut, list, Config::layout::scales_offset(sl.elems), c_elems, output, c_elems,
                                count, out_vec);
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {
template <class Op, class Config, class T, int MaxRanks>
using alltoall_fn = kernel::device_fn<&fp8_alltoall<Config, T, MaxRanks, kernel::launch_group>>;
}  // namespace detail

// Low-precision AlltoAll for this rank: output[p * C + i] = FP8 round trip of rank p's input[r * C + i]
// (exact for p == r), C = count / num_ranks. Errors as lpc::allreduce, plus count % num_ranks != 0.
template <class Config = default_config, class T, int MaxRanks>
void alltoall(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
              gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::alltoall, detail::alltoall_fn, Config>>(
      "rcclx::lpc::alltoall", table, input, output, count, reduce_op::sum, stream, num_blocks);
}

// The same with the table in device memory.
template <class Config = default_config, class T, int MaxRanks>
void alltoall(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
              std::size_t count, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::alltoall, detail::alltoall_fn, Config>>(
      "rcclx::lpc::alltoall", kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count, reduce_op::sum,
      stream, num_blocks);
}

}  // namespace lpc
RCCLX_NAMESPACE_END
