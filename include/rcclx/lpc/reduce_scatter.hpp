// rcclx/lpc/reduce_scatter.hpp: low-precision ReduceScatter: every block crosses the wire once as
// FP8 with block scales, the reduction is fp32 in rank order. Device template + host launcher.
//
//   // count = num_ranks * C input elements per rank; rank r gets the reduction of block r (C elements)
//   bool ok = rcclx::lpc::fp8_reduce_scatter<rcclx::core::op_sum>(rcclx::gpu::block_group{}, table, in, out,
//                                                                 count, blockIdx.x, gridDim.x);
//   rcclx::lpc::reduce_scatter(table, in, out, count, rcclx::reduce_op::sum, stream);
//
// Algorithm, C = count / N (quantization blocks start at each block's first element; the last one
// of a block may be partial, padded logically with zeros):
//   1. quantize every input block c into own slot c (the own block too: every contribution to a
//      sum goes through the same quantization, so the result does not depend on who owns it)
//   2. start barrier
//   3. for each owned unit of block r: load its codes and scale from slot r of every rank (all N
//      in flight), dequantize, combine in rank order 0..N-1 in fp32, round once to T, store
//   4. end barrier
// Steps: 2 barriers, 2 data phases. Traffic per rank, S = count * sizeof(T), Q = count * (1 +
// scale bytes / BlockSize): reads S + Q/N * N = S + Q, writes Q + S/N; (N-1)Q/N cross to peers
// (plain: (N-1)S/N). Error: N quantizations summed (docs/numerics.md). A sum past the range of T
// is +-Inf, as in the plain ReduceScatter (IEEE arithmetic; no second quantization here).
//
// Preconditions (checked by the launcher): as lpc::allreduce, plus count % N == 0; input and output
// disjoint.
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../core/ops.hpp"
#include "../core/peer_table.hpp"
#include "config.hpp"
#include "detail/launch.hpp"
#include "detail/units.hpp"
#include "workspace.hpp"

RCCLX_NAMESPACE_BEGIN
namespace lpc {

// ReduceOp: core::op_sum, op_min or op_max; T: float or rcclx::bf16. Group-collective; false if a
// barrier timed out (leave the kernel).
template <class ReduceOp = core::op_sum, class Config = default_config, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fp8_reduce_scatter(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                          T* output, std::size_t count, int block, int num_blocks) {
  static_assert(is_config_v<Config>, "rcclx::lpc::fp8_reduce_scatter: Config must be an rcclx::lpc::config");
  static_assert(is_element_v<T>, "rcclx::lpc::fp8_reduce_scatter: T must be float or rcclx::bf16");
  using cd = detail::unit_codec<Config, T>;
  constexpr int E = cd::elems;
  const int tid = g.thread_rank(), r = t.rank(), n = t.num_ranks();
  const std::size_t c_elems = count / static_cast<std::size_t>(n);
  if (c_elems == 0) return true;
  const detail::slots<Config> sl(t.capacity_bytes, n);
  const detail::unit_tiles ut(g.size(), block, num_blocks);
  void* own = t.data[r];
  const bool in_vec = (c_elems * sizeof(T)) % 16 == 0 && gpu::is_aligned(input, 16);
  for (int c = 0; c < n; ++c) {
    detail::quantize_chunk<Config, detail::quantize_unroll<Config, T>()>(
        tid, ut, input + static_cast<std::size_t>(c) * c_elems, c_elems, in_vec, sl.payload(own, c),
        sl.scales(own, c), static_cast<T*>(nullptr), false);
  }
  if (!core::barrier(g, t.signals, block, core::barrier_kind::start)) return false;
  detail::rank_slots<MaxRanks> src;
  src.n = n;
  for (int p = 0; p < MaxRanks; ++p) src.base[p] = p < n ? sl.payload(t.data[p], r) : nullptr;
  const bool out_vec = gpu::is_aligned(output, 16);
  detail::reduce_chunk<Config, ReduceOp, T>(tid, ut, src, Config::layout::scales_offset(sl.elems), c_elems,
                                            [&](std::size_t u, int cnt, const float(&acc)[E]) {
                                              if (cnt > 0) cd::store(output + u * E, cnt, out_vec, acc);
                                            });
  return core::barrier(g, t.signals, block, core::barrier_kind::end);
}

namespace detail {
template <class Op, class Config, class T, int MaxRanks>
using reduce_scatter_fn = kernel::device_fn<&fp8_reduce_scatter<Op, Config, T, MaxRanks, kernel::launch_group>>;
}  // namespace detail

// Low-precision ReduceScatter for this rank: output[i] = op over ranks p of the FP8 round trip of
// input_p[r * C + i], C = count / num_ranks. Errors as lpc::allreduce, plus count % num_ranks != 0.
template <class Config = default_config, class T, int MaxRanks>
void reduce_scatter(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
                    reduce_op op = reduce_op::sum, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::reduce_scatter, detail::reduce_scatter_fn, Config>>(
      "rcclx::lpc::reduce_scatter", table, input, output, count, op, stream, num_blocks);
}

// The same with the table in device memory.
template <class Config = default_config, class T, int MaxRanks>
void reduce_scatter(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
                    std::size_t count, reduce_op op = reduce_op::sum, gpu::stream_t stream = {}, int num_blocks = 0) {
  kernel::launch_io<detail::fp8_call<collective::reduce_scatter, detail::reduce_scatter_fn, Config>>(
      "rcclx::lpc::reduce_scatter", kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count, op,
      stream, num_blocks);
}

}  // namespace lpc
RCCLX_NAMESPACE_END
