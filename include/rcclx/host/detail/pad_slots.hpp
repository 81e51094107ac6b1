// rcclx/host/detail/pad_slots.hpp: the communicator's signal pads as the communicator hands them
// out: how large each rank's pad is, the view its kernels get, and the block slot its own barrier
// takes. Every decision about the pads' size and slots is here, in one place.
//
//   const std::size_t bytes = rcclx::host::detail::pad_slots<8>::bytes(options);       // allocate
//   auto pads = rcclx::host::detail::pad_slots<8>::view(pad_bases, rank, n, options);  // the table's
//   rcclx::host::detail::pad_slots<8>::barrier(pads, stream);                          // comm.barrier()
#pragma once

#include <algorithm>
#include <cstddef>

#include "../../core/signal_pad.hpp"
#include "../../core/slot_ranges.hpp"
#include "../../dda/launch_config.hpp"
#include "../../gpu/runtime.hpp"
#include "../options.hpp"
#include "barrier_kernel.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

template <int MaxRanks>
struct pad_slots {
  // Bytes of one rank's pad: max_blocks block slots (the collectives' launches, users' kernels on
  // device_handle()) and the LL regions.
  static std::size_t bytes(const communicator_options& o) { return core::signal_pad_bytes<MaxRanks>(o.max_blocks, o.ll); }

  // The pads as `rank` sees them, from every rank's pad base mapped in this process.
  static core::signal_pads<MaxRanks> view(void* const* pad_bases, int rank, int num_ranks, const communicator_options& o) {
    return core::signal_pads<MaxRanks>::from_bases(pad_bases, rank, num_ranks, o.max_blocks, o.timeout_ns, o.ll);
  }

  // The pads' slots as this communicator hands them out: its collectives' grids (block b: slot b, up
  // to collective_blocks or the library's caps) and its barrier are recorded first; tile-flag
  // kernels then get ranges from the top (communicator::reserve_tile_slots).
  static core::slot_ranges ranges(const communicator_options& o) {
    // The one-shots (AllGather, ReduceScatter, AlltoAll) launch at most as many blocks as the AllReduce.
    const int own = o.collective_blocks > 0 ? o.collective_blocks : dda::default_max_blocks;
    core::slot_ranges r(o.max_blocks);
    r.record(barrier_slot, std::min(own, o.max_blocks), "the communicator's collectives and barrier");
    return r;
  }

  // Loads the barrier's kernel at set-up: no lazy module load behind a spinning kernel.
  static void preload() {
#if RCCLX_BACKEND_GPU
    gpu::preload_kernel(barrier_kernel<MaxRanks>);
#endif
  }

  // communicator::barrier: every rank crosses a start barrier on block slot 0 (barrier_kernel.hpp).
  static void barrier(const core::signal_pads<MaxRanks>& s, gpu::stream_t stream) { launch_barrier(s, stream); }
};

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
