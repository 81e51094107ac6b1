// rcclx/host/options.hpp: the communicator's options, and the environment variables that override
// them, read in one place (communicator_options::from_environment; the communicator applies it).
//
//   rcclx::host::communicator_options o;
//   o.buffer_bytes = 64 << 20;
//   o = rcclx::host::communicator_options::from_environment(o);   // what the communicator will use
//
// Variables: RCCLX_CHECK_CALLS (0/1) for check_calls, RCCLX_COLLECTIVE_BLOCKS (an integer >= 0) for
// collective_blocks, RCCLX_FLAT_THREADS (0 or a multiple of 32 the DDA launchers accept) for
// flat_threads. Unset or empty keeps the option; a value that does not parse or is out of range is
// an rcclx::error (invalid_argument) naming the variable and its value.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <string>

#include "../core/error.hpp"
#include "../core/signal_pad.hpp"
#include "detail/env.hpp"
#include "detail/launch_checks.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {

struct communicator_options {
  // Bytes of each rank's symmetric data buffer. Larger unregistered calls run in chunks.
  std::size_t buffer_bytes = std::size_t(8) << 20;
  // Blocks per collective launch the signal pads have room for (a launch may use fewer).
  int max_blocks = 128;
  // Blocks per rank, at most, of the AllReduce kernels this communicator launches (DDA flat/tree
  // and LPC). 0: the library's shape for a process per GPU (dda/launch_config.hpp: up to 128 blocks,
  // capped at max_blocks; on two H200s, docs/performance.md, 128 blocks cut the tree's time at
  // 256 MiB from 1179 to 820 us and LPC's from 1582 to 649 us against 32). Capped at max_blocks;
  // RCCLX_COLLECTIVE_BLOCKS overrides it.
  int collective_blocks = 0;
  // Threads per block of the DDA flat (one-shot) AllReduce. 0: the library's, by size on GPUs (128 up
  // to 128 KiB, 256 above; dda::default_threads). Otherwise, for every call, a multiple of 32 in
  // [32, 512] (512: the ready-made kernels' bound). RCCLX_FLAT_THREADS overrides it.
  int flat_threads = 0;
  // Bound of every device-side wait; a peer that does not arrive within it becomes an error.
  std::uint64_t timeout_ns = core::default_timeout_ns;
  // LL regions of the signal pads for the barrier-free one-shot (core/ll.hpp): blocks x block_bytes
  // of payload per call (the pad holds 4x that). {0, 0} turns LL off (flat then uses two barriers).
  core::ll_layout ll = core::default_ll_layout();
  // Opened peer allocations kept by the LRU cache beyond those in use.
  std::size_t cache_capacity = 128;
  // Gather a call descriptor before each collective so that ranks disagreeing on count, type,
  // op, algorithm or buffers fail together (one bootstrap allgather per call: tens of us).
  // RCCLX_CHECK_CALLS=0/1 overrides it.
  bool check_calls = true;
  // Zero-copy collectives during graph capture (peer pointers patched after capture). When false,
  // captured collectives copy through the workspace and need no registration.
  bool zero_copy_capture = true;
  // Zero-copy collectives all graph captures of this communicator may hold together (each keeps
  // its own device peer table for the graph's life; ~300 bytes each at MaxRanks = 16). Allocated
  // up front: a capture must not allocate.
  int max_captured_collectives = 4096;

  // `base` (or the defaults) with the environment's overrides applied (see the file comment); the
  // communicator's constructor applies them to the options it is given.
  static communicator_options from_environment() { return from_environment(communicator_options{}); }
  static communicator_options from_environment(communicator_options base) {
    base.check_calls = detail::env_flag("RCCLX_CHECK_CALLS", base.check_calls);
    long long v = 0;
    if (const char* s = detail::env_text("RCCLX_COLLECTIVE_BLOCKS")) {
      if (!detail::parse_int(s, 0, INT_MAX, v))
        throw error(errc::invalid_argument, std::string("RCCLX_COLLECTIVE_BLOCKS = '") + s +
                                                "' is not a block count (an integer in [0, " + std::to_string(INT_MAX) +
                                                "]; communicator_options::collective_blocks)");
      base.collective_blocks = static_cast<int>(v);
    }
    if (const char* s = detail::env_text("RCCLX_FLAT_THREADS")) {
      if (!detail::parse_int(s, INT_MIN, INT_MAX, v))
        throw error(errc::invalid_argument, std::string("RCCLX_FLAT_THREADS = '") + s +
                                                "' is not a number of threads per block (an integer; "
                                                "communicator_options::flat_threads)");
      detail::check_flat_threads(std::string("RCCLX_FLAT_THREADS = '") + s + "'", static_cast<int>(v));
      base.flat_threads = static_cast<int>(v);
    }
    return base;
  }
};

namespace detail {

// The options a communicator of `num_ranks` ranks (communicator<MaxRanks>) runs with: the
// environment's overrides applied, every value checked (an error names the option and its limit),
// collective_blocks capped at max_blocks and buffer_bytes rounded up to 256. The options and the
// bootstrap are the same on every rank, so these errors may be thrown before any exchange.
inline communicator_options checked_options(communicator_options o, int num_ranks, int max_ranks) {
  o = communicator_options::from_environment(o);
  check_flat_threads("communicator: flat_threads", o.flat_threads);
  if (num_ranks < 2 || num_ranks > max_ranks)
    throw error(errc::invalid_argument, "communicator: the bootstrap has " + std::to_string(num_ranks) +
                                            " ranks; communicator<" + std::to_string(max_ranks) + "> supports 2.." +
                                            std::to_string(max_ranks));
  if (o.collective_blocks < 0)
    throw error(errc::invalid_argument, "communicator: collective_blocks = " + std::to_string(o.collective_blocks) +
                                            " must be >= 0");
  o.collective_blocks = o.collective_blocks < o.max_blocks ? o.collective_blocks : o.max_blocks;  // the pads' room
  if (o.max_blocks < 1 || o.max_blocks > 4096)
    throw error(errc::invalid_argument, "communicator: max_blocks = " + std::to_string(o.max_blocks) +
                                            " is outside [1, 4096]");
  if (o.buffer_bytes < 256)
    throw error(errc::invalid_argument, "communicator: buffer_bytes = " + std::to_string(o.buffer_bytes) +
                                            " is below the minimum of 256");
  if (o.max_captured_collectives < 0)
    throw error(errc::invalid_argument, "communicator: max_captured_collectives must be >= 0");
  core::check_ll_layout(o.ll);
  o.buffer_bytes = (o.buffer_bytes + 255) / 256 * 256;
  return o;
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
