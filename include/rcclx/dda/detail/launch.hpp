// rcclx/dda/detail/launch.hpp: what the host side of the one-shot AllGather, AlltoAll and
// ReduceScatter adds to kernel::launch_io (kernel/launch.hpp): the block count (identical on every
// rank), the one-shot shape and the checks of a table the host can read.
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

// Blocks per rank of a one-shot call: one tile of the elements each rank moves per peer (the
// input, or one of its num_ranks blocks) per block, balanced (kernel::blocks_for_elems).
template <class T>
RCCLX_HOST_DEVICE constexpr int one_shot_blocks(kernel::io_kind k, std::size_t count, int num_ranks,
                                                const launch_config& cfg) {
  const std::size_t elems = k == kernel::io_kind::gather ? count : count / static_cast<std::size_t>(num_ranks);
  return kernel::blocks_for_elems<T>(elems, cfg.threads, cfg.flat_max_blocks);
}

// A one-shot collective for kernel::launch_io: its output shape Kind and its device template
// Fn<Op, Schedule, T, MaxRanks> (a kernel::device_fn; Op unused but by ReduceScatter).
template <kernel::io_kind Kind, template <class, class, class, int> class Fn, class Schedule>
struct one_shot {
  static constexpr kernel::io_kind io = Kind;
  using schedule = Schedule;
  template <class Op, class T, int MaxRanks>
  using fn = Fn<Op, Schedule, T, MaxRanks>;

  template <class T>
  static kernel::grid_shape grid(std::size_t count, int num_ranks, int, int num_blocks) {
    static_assert(Kind != kernel::io_kind::scatter || core::is_reducible_v<T>,
                  "rcclx::dda::reduce_scatter: T must be float, rcclx::bf16, rcclx::fp16 or int32_t");
    const launch_config cfg = one_shot_launch_config();
    return {num_blocks > 0 ? num_blocks : one_shot_blocks<T>(Kind, count, num_ranks, cfg), cfg.threads};
  }

  template <class T>
  static std::size_t buffer_bytes(std::size_t count, int) {
    return count * sizeof(T);
  }

  // Buffers, capacity for the input, the grid; the input is this rank's symmetric buffer or
  // disjoint from it; the output is disjoint from it (peers read it).
  template <class T, int MaxRanks>
  static void check_table(const std::string& who, const core::peer_table<T, MaxRanks>& t, const T* input,
                          const T* output, std::size_t count, int num_blocks) {
    kernel::check_table(who, t, count, count * sizeof(T), "the input", num_blocks);
    if (count == 0) return;
    const T* own = t.data[t.rank()];
    if (input != own && kernel::overlaps(input, count * sizeof(T), own, t.capacity_bytes))
      throw error(errc::invalid_argument, who + ": input overlaps this rank's symmetric buffer without being it");
    if (kernel::overlaps(output, kernel::output_elems(Kind, count, t.num_ranks()) * sizeof(T), own, t.capacity_bytes))
      throw error(errc::invalid_argument, who + ": output overlaps this rank's symmetric buffer (peers read it)");
  }
};

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
