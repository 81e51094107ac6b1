// rcclx/host/detail/launch_checks.hpp: what the communicator takes from the collectives' own
// launch code: the rank-local argument checks of each collective, the one check of a threads-per-block
// value, and the launch shape of an AllReduce under the communicator's options (public names of
// dda/, lpc/ and kernel/ only).
//
//   const auto s = rcclx::host::detail::allreduce_shape<float>(count, rcclx::algorithm::flat, n,
//                                                              collective_blocks, flat_threads, pad_blocks);
//   rcclx::dda::allreduce(table, in, out, count, op, rcclx::algorithm::flat, stream, s.blocks, s.threads);
#pragma once

#include <cstddef>
#include <string>

#include "../../core/ops.hpp"
#include "../../kernel/checks.hpp"
#include "../../dda/allgather.hpp"
#include "../../dda/allreduce.hpp"
#include "../../dda/alltoall.hpp"
#include "../../dda/reduce_scatter.hpp"
#include "../../lpc/allreduce.hpp"
#include "call_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

using kernel::overlaps;

// Every threads-per-block value the communicator takes (communicator_options::flat_threads,
// RCCLX_FLAT_THREADS, each call's shape) is checked here, by the DDA launchers' own rule and bound;
// `who` starts the error's message.
inline void check_flat_threads(const std::string& who, int threads) { dda::check_threads(who, threads); }

// The launch shape of an AllReduce: blocks per rank (0: the library's choice) and threads per block
// (0: the library's).
struct launch_shape {
  int blocks;
  int threads;
};

// The shape of an AllReduce of `count` elements with algorithm flat, tree or low_precision (not
// automatic) on `n` ranks, on pads of `pad_blocks` slots: the library's shape for a process per
// GPU (dda/launch_config.hpp, lpc's default_launch_config), flat with `flat_threads` per block when
// it is not 0, and at most `collective_blocks` blocks when that is not 0. A function of its
// arguments only, so every rank launches the same grid.
template <class T>
inline launch_shape allreduce_shape(std::size_t count, algorithm a, int n, int collective_blocks, int flat_threads,
                                    int pad_blocks) {
  if (a == algorithm::low_precision) {
    lpc::launch_config c = lpc::default_launch_config(lpc::collective::allreduce, pad_blocks);
    if (collective_blocks > 0) c.max_blocks = collective_blocks;
    return {lpc::num_blocks_for<lpc::default_config>(lpc::collective::allreduce, count, n, c), 0};
  }
  dda::launch_config c =
      dda::launch_config_for("allreduce", count * sizeof(T), a, pad_blocks, a == algorithm::flat ? flat_threads : 0);
  if (collective_blocks > 0) c.flat_max_blocks = c.tree_max_blocks = collective_blocks;
  // The host backend runs a block as one thread: its launchers take no threads-per-block value.
  return {dda::num_blocks_for<T>(count, a, n, c), RCCLX_BACKEND_GPU ? c.threads : 0};
}

// The plain (rcclx::dda) collective's checks that need no table: pointers, count, op, algorithm.
template <collective_kind Kind, class T>
inline void check_plain_call(const std::string& who, int n, int max_ranks, const T* input, T* output,
                             std::size_t count, const reduce_spec& op, algorithm algo) {
  if constexpr (Kind == collective_kind::allreduce) {
    dda::check_allreduce_call<T>(who, n, max_ranks, input, output, count, op, algo, 0);
  } else {
    static_assert(Kind == collective_kind::allgather || Kind == collective_kind::reduce_scatter ||
                      Kind == collective_kind::alltoall,
                  "a collective with plain checks");
    if constexpr (Kind == collective_kind::reduce_scatter) {
      if (is_valid(op.op) && (!is_basic(op.op) || op.factor_device)) kernel::check_spec<T>(who, op);
      else kernel::check_op(who, op.op);
    }
    constexpr kernel::io_kind io = Kind == collective_kind::allgather        ? kernel::io_kind::gather
                                   : Kind == collective_kind::reduce_scatter ? kernel::io_kind::scatter
                                                                             : kernel::io_kind::exchange;
    kernel::check_call<T>(who, io, n, max_ranks, input, output, count, 0);
  }
}

// The low-precision (rcclx::lpc) collective's checks that need no table; the op where one applies.
template <class T>
inline void check_low_precision_call(const std::string& who, lpc::collective c, int n, int max_ranks, const T* input,
                                     T* output, std::size_t count, reduce_op op) {
  if (c == lpc::collective::allreduce || c == lpc::collective::reduce_scatter) kernel::check_op(who, op);
  kernel::check_call<T>(who, lpc::io_of(c), n, max_ranks, input, output, count, 0);
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
