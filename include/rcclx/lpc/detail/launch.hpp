// rcclx/lpc/detail/launch.hpp: what the host side of the four LPC collectives adds to
// kernel::launch_io (kernel/launch.hpp): the launch shape, the block count of a call (identical on
// every rank) and the checks of a table the host can read.
#pragma once

#include <cstddef>
#include <string>

#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../dda/launch_config.hpp"
#include "../../kernel/checks.hpp"
#include "../../kernel/launch.hpp"
#include "../../kernel/layout.hpp"
#include "../config.hpp"
#include "../workspace.hpp"
#include "units.hpp"

RCCLX_NAMESPACE_BEGIN
namespace lpc {

// Threads per block and the block cap of the ready-made LPC kernels.
struct launch_config {
  int threads;     // a multiple of 32 on GPUs (lanes of a quantization block are lanes of one warp)
  int max_blocks;  // blocks per rank, at most
};

// The shape for a process per GPU (dda/launch_config.hpp says why): 512 threads; the AllReduce up
// to 128 blocks per rank (measured on two H200s: 256 MiB bf16 in 649 us against 1582 with 32),
// capped by the pads' max_blocks; AllGather, AlltoAll and ReduceScatter up to 32 (not measured on
// a GPU of its own yet). Host backend: 1 thread, 4 blocks.
RCCLX_HOST_DEVICE constexpr launch_config default_launch_config(collective c,
                                                                int pad_blocks = dda::default_max_blocks) {
  if (c != collective::allreduce) {
    const dda::launch_config o = dda::one_shot_launch_config();
    return {o.threads, o.flat_max_blocks};
  }
  const dda::launch_config a = dda::default_launch_config(0, algorithm::tree, pad_blocks);
  return {a.threads, a.tree_max_blocks};
}

// Blocks per rank of a call: one tile (threads units of 16 elements; a block's worth on the host) of
// the largest chunk per block up to the cap, then as few blocks as keep the tiles per block equal.
// A pure function of its arguments, so every rank launches the same grid.
template <class Config = default_config>
RCCLX_HOST_DEVICE constexpr int num_blocks_for(collective c, std::size_t count, int num_ranks,
                                               const launch_config& cfg) {
  constexpr std::size_t e = static_cast<std::size_t>(detail::unit_elems<Config>());
  const std::size_t units = (detail::chunk_elems<Config::block_size>(c, count, num_ranks) + e - 1) / e;
  const std::size_t g = static_cast<std::size_t>(cfg.threads);
  return kernel::balanced_blocks((units + g - 1) / g, cfg.max_blocks);
}
// The same with the default shape of the collective (pads of dda::default_max_blocks or more).
template <class Config = default_config>
RCCLX_HOST_DEVICE constexpr int num_blocks_for(collective c, std::size_t count, int num_ranks) {
  return num_blocks_for<Config>(c, count, num_ranks, default_launch_config(c));
}

namespace detail {

// A low-precision collective for kernel::launch_io: C and its device template
// Fn<Op, Config, T, MaxRanks> (a kernel::device_fn; Op unused but by the reducing ones).
template <collective C, template <class, class, class, int> class Fn, class Config>
struct fp8_call {
  static_assert(is_config_v<Config>, "rcclx::lpc: Config must be an rcclx::lpc::config");
  static constexpr kernel::io_kind io = io_of(C);
  using schedule = typename Config::schedule;
  template <class Op, class T, int MaxRanks>
  using fn = Fn<Op, Config, T, MaxRanks>;

  // The AllReduce's block cap follows the pads (dda::default_max_blocks when the host cannot read them).
  template <class T>
  static kernel::grid_shape grid(std::size_t count, int num_ranks, int pad_blocks, int num_blocks) {
    static_assert(is_element_v<T>, "rcclx::lpc: element type must be float or rcclx::bf16");
    const launch_config cfg = default_launch_config(C, pad_blocks > 0 ? pad_blocks : dda::default_max_blocks);
    return {num_blocks > 0 ? num_blocks : num_blocks_for<Config>(C, count, num_ranks, cfg), cfg.threads};
  }

  template <class T>
  static std::size_t buffer_bytes(std::size_t count, int num_ranks) {
    return workspace_bytes<Config>(C, count, num_ranks);
  }

  // Buffers, capacity for the FP8 slots, pads, and that neither input nor output lies in this
  // rank's symmetric buffer (it holds the FP8 data peers read).
  template <class T, int MaxRanks>
  static void check_table(const std::string& who, const core::peer_table<T, MaxRanks>& t, const T* input,
                          const T* output, std::size_t count, int num_blocks) {
    const int n = t.num_ranks();
    kernel::check_table(who, t, count, workspace_bytes<Config>(C, count, n),
                        std::string("FP8 codes and scales of ") + to_string(C) + ", see rcclx::lpc::workspace_bytes",
                        num_blocks);
    if (count == 0) return;
    const void* own = t.data[t.rank()];
    if (kernel::overlaps(input, count * sizeof(T), own, t.capacity_bytes))
      throw error(errc::invalid_argument, who + ": input lies in this rank's symmetric buffer, which holds the FP8 "
                                                "data of the call: pass the input in other memory");
    if (kernel::overlaps(output, kernel::output_elems(io, count, n) * sizeof(T), own, t.capacity_bytes))
      throw error(errc::invalid_argument, who + ": output lies in this rank's symmetric buffer, which holds the FP8 "
                                                "data of the call (peers read it)");
  }
};

}  // namespace detail
}  // namespace lpc
RCCLX_NAMESPACE_END
