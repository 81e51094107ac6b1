// rcclx/host/detail/launch_checks.hpp: what the communicator takes from the collectives' own
// launch code: the rank-local argument checks of each collective, the one check of a threads-per-block
// value, and the launch shape of an AllReduce under the communicator's options. The communicator
// reaches the launchers' internal helpers (dda::detail, lpc::detail) here and nowhere else.
//
//   const auto s = rcclx::host::detail::allreduce_shape<float>(count, rcclx::algorithm::flat, n,
//                                                              collective_blocks, flat_threads);
//   rcclx::dda::allreduce(table, in, out, count, op, rcclx::algorithm::flat, stream, s.blocks, s.threads);
#pragma once

#include <cstddef>
#include <string>

#include "../../core/ops.hpp"
#include "../../dda/allgather.hpp"
#include "../../dda/allreduce.hpp"
#include "../../dda/alltoall.hpp"
#include "../../dda/reduce_scatter.hpp"
#include "../../lpc/allreduce.hpp"
#include "call_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

// Do [a, a + a_bytes) and [b, b + b_bytes) share a byte?
inline bool overlaps(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  return dda::detail::overlaps(a, a_bytes, b, b_bytes);
}

// The DDA launch configuration with `threads` per block (0: the library's). Every threads-per-block
// value the communicator takes (communicator_options::flat_threads, RCCLX_FLAT_THREADS, each
// call's shape) is checked here, against the DDA launchers' own rule and bound; `who` starts the
// error's message.
inline dda::launch_config flat_threads_config(const std::string& who, int threads) {
  return dda::detail::with_threads(who.c_str(), threads);
}

// The launch shape of an AllReduce: blocks per rank (0: the library's choice) and threads per block
// (0: the library's).
struct launch_shape {
  int blocks;
  int threads;
};

// The shape of an AllReduce of `count` elements with algorithm flat, tree or low_precision (not
// automatic) on `n` ranks: flat takes `flat_threads` per block, or by size on GPUs (128 up to
// 128 KiB, 256 above); the blocks follow the library's rule under the cap `collective_blocks`
// (0: the library's cap). A function of its arguments only, so every rank launches the same grid.
template <class T>
inline launch_shape allreduce_shape(std::size_t count, algorithm a, int n, int collective_blocks, int flat_threads) {
  if (a == algorithm::low_precision) {
    if (collective_blocks == 0) return {0, 0};
    lpc::launch_config cfg = lpc::default_launch_config();
    cfg.max_blocks = collective_blocks;
    return {lpc::num_blocks_for<lpc::default_config>(lpc::collective::allreduce, count, n, cfg), 0};
  }
  int threads = 0;
#if RCCLX_BACKEND_GPU
  if (a == algorithm::flat)
    threads = flat_threads > 0 ? flat_threads : (count * sizeof(T) <= (std::size_t(128) << 10) ? 128 : 256);
#else
  (void)flat_threads;
#endif
  if (collective_blocks == 0 && threads == 0) return {0, 0};
  dda::launch_config cfg = flat_threads_config("allreduce", threads);
  if (collective_blocks > 0) cfg.flat_max_blocks = cfg.tree_max_blocks = collective_blocks;
  return {dda::num_blocks_for<T>(count, a, n, cfg), threads};
}

// The plain (rcclx::dda) collective's checks that need no table: pointers, count, op, algorithm.
template <collective_kind Kind, class T>
inline void check_plain_call(const std::string& who, int n, int max_ranks, const T* input, T* output,
                             std::size_t count, reduce_op op, algorithm algo) {
  if constexpr (Kind == collective_kind::allreduce) {
    dda::detail::validate_call<T>(who.c_str(), n, max_ranks, input, output, count, op, algo, 0);
  } else if constexpr (Kind == collective_kind::allgather) {
    dda::detail::validate_allgather(who, n, max_ranks, input, output, count, 0);
  } else if constexpr (Kind == collective_kind::reduce_scatter) {
    dda::detail::validate_reduce_scatter(who, n, max_ranks, input, output, count, op, 0);
  } else {
    static_assert(Kind == collective_kind::alltoall, "a collective with plain checks");
    dda::detail::validate_alltoall(who, n, max_ranks, input, output, count, 0);
  }
}

// The low-precision (rcclx::lpc) collective's checks that need no table; the op where one applies.
template <class T>
inline void check_low_precision_call(const std::string& who, lpc::collective c, int n, int max_ranks, const T* input,
                                     T* output, std::size_t count, reduce_op op) {
  if (c == lpc::collective::allreduce || c == lpc::collective::reduce_scatter) lpc::detail::validate_op(who, op);
  lpc::detail::validate_call<T>(who, c, n, max_ranks, input, output, count, 0);
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
