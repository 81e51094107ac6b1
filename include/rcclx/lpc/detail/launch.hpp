// rcclx/lpc/detail/launch.hpp: what the four LPC host launchers share, written once for both table
// forms (by value, in device memory): the launch shape, the block count of a call (identical on
// every rank), the argument checks, each naming the argument, its value and the limit, and the
// launch of a block body (kernel/launch.hpp).
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

// Checks of a table the host can read: buffers, capacity for the FP8 slots, pads, and that neither
// input nor output lies in this rank's symmetric buffer (it holds the FP8 data peers read).
template <class Config, class T, int MaxRanks>
inline void check_table(const std::string& who, collective c, const core::peer_table<T, MaxRanks>& t, const T* input,
                        const T* output, std::size_t count, int num_blocks) {
  const int n = t.num_ranks();
  kernel::check_table(who, t, count, workspace_bytes<Config>(c, count, n),
                      std::string("FP8 codes and scales of ") + to_string(c) + ", see rcclx::lpc::workspace_bytes",
                      num_blocks);
  if (count == 0) return;
  const void* own = t.data[t.rank()];
  if (kernel::overlaps(input, count * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": input lies in this rank's symmetric buffer, which holds the FP8 "
                                              "data of the call: pass the input in other memory");
  if (kernel::overlaps(output, kernel::output_elems(io_of(c), count, n) * sizeof(T), own, t.capacity_bytes))
    throw error(errc::invalid_argument, who + ": output lies in this rank's symmetric buffer, which holds the FP8 "
                                              "data of the call (peers read it)");
}

// The whole host-side sequence of a launcher: checks, block count, launch of the body
// kernel::io_body<Fn<Op, Config>, T> (Fn names the collective's device template; Op the operator,
// core::op_sum for the collectives without one).
template <collective C, template <class, class> class Fn, class Config, class T, int MaxRanks, class Table>
inline void launch(const char* fn, const Table& table, const T* input, T* output, std::size_t count, reduce_op op,
                   gpu::stream_t stream, int num_blocks) {
  static_assert(is_config_v<Config>, "rcclx::lpc: Config must be an rcclx::lpc::config");
  static_assert(is_element_v<T>, "rcclx::lpc: element type must be float or rcclx::bf16");
  constexpr bool reduces = C == collective::allreduce || C == collective::reduce_scatter;
  const std::string who = kernel::name_of(fn, table);
  const int n = kernel::num_ranks_of(table);
  if (reduces) kernel::check_op(who, op);
  kernel::check_call<T>(who, io_of(C), n, MaxRanks, input, output, count, num_blocks);
  kernel::check_schedule<typename Config::schedule>(who, n);
  const core::peer_table<T, MaxRanks>* t = kernel::readable(who, table);
  const launch_config cfg = default_launch_config(C, t ? t->signals.max_blocks : dda::default_max_blocks);
  const kernel::grid_shape shape{num_blocks > 0 ? num_blocks : num_blocks_for<Config>(C, count, n, cfg), cfg.threads};
  if (t) check_table<Config>(who, C, *t, input, output, count, shape.blocks);
  if (count == 0) return;  // nothing to move (the same on every rank: no barrier needed)
  const kernel::table_need need{n, workspace_bytes<Config>(C, count, n)};
  const auto run = [&](auto op_tag) {
    kernel::launch(who, table, need, shape, kernel::io_body<Fn<decltype(op_tag), Config>, T>{input, output, count}, stream);
  };
  if constexpr (reduces) core::with_op(op, run);
  else run(core::op_sum{});
}

}  // namespace detail
}  // namespace lpc
RCCLX_NAMESPACE_END
