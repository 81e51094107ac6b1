// rcclx/lpc/detail/launch.hpp: what the four LPC host launchers share: the launch shape, the block
// count of a call (identical on every rank), and the argument checks, each naming the argument,
// its value and the limit.
#pragma once

#include <cstddef>
#include <string>

#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../dda/detail/launch.hpp"
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

RCCLX_HOST_DEVICE constexpr launch_config default_launch_config() {
#if RCCLX_BACKEND_GPU
  return {512, 32};  // the DDA kernels' shape: fits the pads emulated_world and users size for DDA
#else
  return {1, 4};  // CI machines have two cores; the partition logic is the same at any count
#endif
}

// Blocks per rank of a call: one tile (threads units of 16 elements; a block's worth on the host) of
// the largest chunk per block up to the cap, then as few blocks as keep the tiles per block equal.
// A pure function of its arguments, so every rank launches the same grid.
template <class Config = default_config>
RCCLX_HOST_DEVICE constexpr int num_blocks_for(collective c, std::size_t count, int num_ranks,
                                               const launch_config& cfg = default_launch_config()) {
  constexpr std::size_t e = static_cast<std::size_t>(detail::unit_elems<Config>());
  const std::size_t units = (detail::chunk_elems<Config::block_size>(c, count, num_ranks) + e - 1) / e;
  const std::size_t g = static_cast<std::size_t>(cfg.threads);
  return dda::detail::balanced_blocks((units + g - 1) / g, cfg.max_blocks);
}

namespace detail {

// Checks that need no table contents (the device-table overloads run them too).
template <class T>
inline void validate_call(const std::string& who, collective c, int n, int max_ranks, const T* input, T* output,
                          std::size_t count, int num_blocks) {
  dda::detail::check_num_ranks(who, n, max_ranks);
  dda::detail::check_num_blocks(who, num_blocks);
  dda::detail::check_count<T>(who, count, c == collective::allgather ? static_cast<std::size_t>(n) : 1);
  if (c == collective::reduce_scatter || c == collective::alltoall) dda::detail::check_divisible(who, count, n);
  if (count == 0) return;
  const std::size_t nn = static_cast<std::size_t>(n);
  const std::size_t out_elems = c == collective::allgather ? count * nn
                                : c == collective::reduce_scatter ? count / nn
                                                                  : count;
  // In place only where the output has the input's size and layout (every unit is read by the
  // thread that later writes it).
  const bool may_alias = c == collective::allreduce || c == collective::alltoall;
  dda::detail::check_in_out<T>(who, input, count, output, out_elems, may_alias);
}

inline void validate_op(const std::string& who, reduce_op op) {
  if (!is_valid(op))
    throw error(errc::invalid_argument, who + ": op = " + std::to_string(static_cast<int>(op)) +
                                            " is not a reduce_op (sum, min, max)");
}

// Checks of a table the host can read: buffers, capacity for the FP8 slots, pads, and that neither
// input nor output lies in this rank's symmetric buffer (it holds the FP8 data peers read).
template <class Config, class T, int MaxRanks>
inline void validate_table(const std::string& who, collective c, const core::peer_table<T, MaxRanks>& t,
                           const T* input, const T* output, std::size_t count, int num_blocks) {
  dda::detail::check_table_buffers(who, t);
  const int n = t.num_ranks();
  dda::detail::check_capacity(who, count, workspace_bytes<Config>(c, count, n), t.capacity_bytes,
                              std::string("FP8 codes and scales of ") + to_string(c) +
                                  ", see rcclx::lpc::workspace_bytes");
  dda::detail::check_blocks_fit(who, num_blocks, t.signals);
  if (count == 0) return;
  const std::size_t nn = static_cast<std::size_t>(n);
  const std::size_t out_elems = c == collective::allgather ? count * nn
                                : c == collective::reduce_scatter ? count / nn
                                                                  : count;
  const void* own = t.data[t.rank()];
  if (dda::detail::overlaps(input, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": input lies in this rank's symmetric buffer, which holds the FP8 "
                                              "data of the call: pass the input in other memory");
  if (dda::detail::overlaps(output, out_elems * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": output lies in this rank's symmetric buffer, which holds the FP8 "
                                              "data of the call (peers read it)");
}

// The whole host-side sequence of a launcher: checks, block count, launch.
template <class Config, class T, int MaxRanks, class TableArg, class Body>
inline void launch(const std::string& who, collective c, const TableArg& table_arg, int n, const T* input, T* output,
                   std::size_t count, const Body& body, gpu::stream_t stream, int num_blocks) {
  static_assert(is_config_v<Config>, "rcclx::lpc: Config must be an rcclx::lpc::config");
  static_assert(is_element_v<T>, "rcclx::lpc: element type must be float or rcclx::bf16");
  validate_call<T>(who, c, n, MaxRanks, input, output, count, num_blocks);
  dda::detail::check_schedule<typename Config::schedule>(who, n);
  const launch_config cfg = default_launch_config();
  const int nb = num_blocks > 0 ? num_blocks : num_blocks_for<Config>(c, count, n, cfg);
  if constexpr (std::is_pointer<TableArg>::value) {
    if (!table_arg) throw error(errc::invalid_argument, who + ": device_table is null");
#if RCCLX_BACKEND_HOST
    // Host "device memory" is readable: the full checks apply.
    if (table_arg->num_ranks() != n)
      throw error(errc::mismatch, who + ": num_ranks = " + std::to_string(n) + " but the table has " +
                                      std::to_string(table_arg->num_ranks()));
    validate_table<Config>(who, c, *table_arg, input, output, count, nb);
#endif
  } else {
    validate_table<Config>(who, c, table_arg, input, output, count, nb);
  }
  if (count == 0) return;  // nothing to move (the same on every rank: no barrier needed)
  dda::detail::launch_body<T, MaxRanks>(who.c_str(), table_arg, n, workspace_bytes<Config>(c, count, n), body, stream,
                                        nb, cfg.threads);
}

}  // namespace detail
}  // namespace lpc
RCCLX_NAMESPACE_END
