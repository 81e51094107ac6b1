// rcclx/dda/reduce_scatter.hpp: ReduceScatter by direct loads (one-shot, full precision): the
// device template for your own kernels and the host launcher for one rank.
//
//   // count = num_ranks * C input elements per rank; rank r gets the reduction of block r (C elements):
//   bool ok = rcclx::dda::flat_reduce_scatter<rcclx::core::op_sum>(rcclx::gpu::block_group{}, table, in, out,
//                                                                  count, blockIdx.x, gridDim.x);
//   rcclx::dda::reduce_scatter(table, in, out, count, rcclx::reduce_op::max, stream);   // host launcher
//
// Algorithm, C = count / N (tiles of C elements, tile t owned by block t % nb):
//   1. copy input block c into own symmetric buffer block c for c != r (skipped when the input is
//      the buffer; block r is read from the input itself)
//   2. start barrier
//   3. for every owned vector of block r: load it from all N ranks (rank r: its input; up to 8
//      loads in flight), reduce in rank order 0..N-1 in fp32 (int32 for int32), write output
//   4. end barrier
// Steps: 2 barriers, 1 data phase. Traffic per rank for S = count * sizeof(T): reads (N-1)S/N
// (copy) + S (block r from N ranks), writes (N-1)S/N (copy; none when the input is the buffer) +
// S/N (output); (N-1)S/N cross to peers. Deterministic: the same rank order and one rounding per element, so the
// result equals block r of dda::allreduce's result bit for bit.
//
// Preconditions (checked by the launcher): count % N == 0 and the same on every rank, count <=
// table.capacity(); input and output aligned to sizeof(T) and disjoint; input is own symmetric buffer
// or disjoint from it; output disjoint from it.
#pragma once

#include <cstddef>
#include <string>

#include "../core/barrier.hpp"
#include "../mesh/schedule.hpp"
#include "detail/launch.hpp"
#include "detail/tiles.hpp"
#include "op_allreduce.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {

// ReduceOp: core::op_sum, core::op_min or core::op_max; T: float, rcclx::bf16, rcclx::fp16, int32_t.
// Group-collective; returns false if a barrier timed out (the caller must leave the kernel).
template <class ReduceOp, class T, int MaxRanks, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool flat_reduce_scatter(const Group& g, const core::peer_table<T, MaxRanks>& t, const T* input,
                                           T* output, std::size_t count, int block, int num_blocks) {
  static_assert(core::is_reducible_v<T>,
                "dda::flat_reduce_scatter: T must be float, rcclx::bf16, rcclx::fp16 or int32_t");
  return flat_reduce_scatter_op(g, t, input, output, count, block, num_blocks, ReduceOp{});
}

namespace detail {
template <class Op, class Schedule, class T, int MaxRanks>
using reduce_scatter_fn = kernel::device_fn<&flat_reduce_scatter<Op, T, MaxRanks, kernel::launch_group>>;
}  // namespace detail

// Blocks per rank the launcher uses (identical on every rank).
template <class T>
RCCLX_HOST_DEVICE constexpr int reduce_scatter_blocks(std::size_t count, int num_ranks,
                                                      const launch_config& cfg = one_shot_launch_config()) {
  return detail::one_shot_blocks<T>(kernel::io_kind::scatter, count, num_ranks, cfg);
}

// ReduceScatter for this rank: output[i] = op over ranks p of input_p[r * C + i], C = count / num_ranks.
// Errors as dda::allgather, plus an invalid op and count % num_ranks != 0 (invalid_argument).
// product and avg run op_allreduce.hpp's kernel; premul_sum: the reduce_spec overloads.
template <class T, int MaxRanks>
void reduce_scatter(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
                    reduce_op op = reduce_op::sum, gpu::stream_t stream = {}, int num_blocks = 0) {
  op = core::effective_op<T>(op);     // bool: sum = or, product = and
  if (is_valid(op) && !is_basic(op))  // product, avg
    return detail::reduce_scatter_extended<T, MaxRanks>("rcclx::dda::reduce_scatter", table, input, output, count,
                                                        reduce_spec{op}, stream, num_blocks);
  kernel::launch_io<detail::one_shot<kernel::io_kind::scatter, detail::reduce_scatter_fn, mesh::default_schedule>>(
      "rcclx::dda::reduce_scatter", table, input, output, count, op, stream, num_blocks);
}
// The same with a reduce_spec (any op; premul_sum with its factor).
template <class T, int MaxRanks>
void reduce_scatter(const core::peer_table<T, MaxRanks>& table, const T* input, T* output, std::size_t count,
                    const reduce_spec& op, gpu::stream_t stream = {}, int num_blocks = 0) {
  if (is_valid(op.op) && (!is_basic(core::effective_op<T>(op.op)) || op.factor_device))
    return detail::reduce_scatter_extended<T, MaxRanks>("rcclx::dda::reduce_scatter", table, input, output, count, op,
                                                        stream, num_blocks);
  reduce_scatter(table, input, output, count, op.op, stream, num_blocks);
}

// The same with the table in device memory (the kernel checks rank count, capacity and grid).
template <class T, int MaxRanks>
void reduce_scatter(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
                    std::size_t count, reduce_op op = reduce_op::sum, gpu::stream_t stream = {}, int num_blocks = 0) {
  op = core::effective_op<T>(op);
  if (is_valid(op) && !is_basic(op))
    return detail::reduce_scatter_extended<T, MaxRanks>("rcclx::dda::reduce_scatter(device table)",
                                                        kernel::device_table<T, MaxRanks>{device_table, num_ranks},
                                                        input, output, count, reduce_spec{op}, stream, num_blocks);
  kernel::launch_io<detail::one_shot<kernel::io_kind::scatter, detail::reduce_scatter_fn, mesh::default_schedule>>(
      "rcclx::dda::reduce_scatter", kernel::device_table<T, MaxRanks>{device_table, num_ranks}, input, output, count,
      op, stream, num_blocks);
}
template <class T, int MaxRanks>
void reduce_scatter(const core::peer_table<T, MaxRanks>* device_table, int num_ranks, const T* input, T* output,
                    std::size_t count, const reduce_spec& op, gpu::stream_t stream = {}, int num_blocks = 0) {
  if (is_valid(op.op) && (!is_basic(core::effective_op<T>(op.op)) || op.factor_device))
    return detail::reduce_scatter_extended<T, MaxRanks>("rcclx::dda::reduce_scatter(device table)",
                                                        kernel::device_table<T, MaxRanks>{device_table, num_ranks},
                                                        input, output, count, op, stream, num_blocks);
  reduce_scatter(device_table, num_ranks, input, output, count, op.op, stream, num_blocks);
}

}  // namespace dda
RCCLX_NAMESPACE_END
