// rcclx/dda/detail/launch.hpp: the host side of the one-shot AllGather, AlltoAll and ReduceScatter,
// written once for both table forms (by value, in device memory): the checks that name the
// argument and the limit (kernel/checks.hpp), the block count (identical on every rank), and the
// launch of a block body (kernel/launch.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "../../core/error.hpp"
#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../kernel/checks.hpp"
#include "../../kernel/launch.hpp"
#include "../../kernel/layout.hpp"
#include "../launch_config.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {
namespace detail {

// Checks of a readable table for a one-shot call of kind k: buffers, capacity for the input, the
// grid; the input is this rank's symmetric buffer or disjoint from it; the output is disjoint from
// it (peers read it).
template <class T, int MaxRanks>
inline void check_one_shot_table(const std::string& who, kernel::io_kind k, const core::peer_table<T, MaxRanks>& t,
                                 const T* input, const T* output, std::size_t count, int num_blocks) {
  kernel::check_table(who, t, count, count * sizeof(T), "the input", num_blocks);
  if (count == 0) return;
  const T* own = t.data[t.rank()];
  if (input != own && kernel::overlaps(input, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": input overlaps this rank's symmetric buffer without being it");
  if (kernel::overlaps(output, kernel::output_elems(k, count, t.num_ranks()) * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": output overlaps this rank's symmetric buffer (peers read it)");
}

// Blocks per rank of a one-shot call: one tile of the elements each rank moves per peer (the
// input, or one of its num_ranks blocks) per block, balanced (kernel::blocks_for_elems).
template <class T>
RCCLX_HOST_DEVICE constexpr int one_shot_blocks(kernel::io_kind k, std::size_t count, int num_ranks,
                                                const launch_config& cfg) {
  const std::size_t elems = k == kernel::io_kind::gather ? count : count / static_cast<std::size_t>(num_ranks);
  return kernel::blocks_for_elems<T>(elems, cfg.threads, cfg.flat_max_blocks);
}

// The whole host-side sequence of a one-shot launcher: checks, block count, launch of the body
// kernel::io_body<Fn<Op, Schedule>, T> (Fn names the collective's device template; Op the operator,
// core::op_sum for the collectives without one).
template <kernel::io_kind Kind, template <class, class> class Fn, class Schedule, class T, int MaxRanks, class Table>
inline void launch_one_shot(const char* fn, const Table& table, const T* input, T* output, std::size_t count,
                            reduce_op op, gpu::stream_t stream, int num_blocks) {
  constexpr bool reduces = Kind == kernel::io_kind::scatter;
  const std::string who = kernel::name_of(fn, table);
  const int n = kernel::num_ranks_of(table);
  if (reduces) kernel::check_op(who, op);
  kernel::check_call<T>(who, Kind, n, MaxRanks, input, output, count, num_blocks);
  kernel::check_schedule<Schedule>(who, n);
  const launch_config cfg = one_shot_launch_config();
  const kernel::grid_shape shape{num_blocks > 0 ? num_blocks : one_shot_blocks<T>(Kind, count, n, cfg), cfg.threads};
  if (const core::peer_table<T, MaxRanks>* t = kernel::readable(who, table))
    check_one_shot_table(who, Kind, *t, input, output, count, shape.blocks);
  if (count == 0) return;
  const kernel::table_need need{n, count * sizeof(T)};
  const auto run = [&](auto op_tag) {
    kernel::launch(who, table, need, shape, kernel::io_body<Fn<decltype(op_tag), Schedule>, T>{input, output, count},
                   stream);
  };
  if constexpr (reduces) core::with_op(op, run);
  else run(core::op_sum{});
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
