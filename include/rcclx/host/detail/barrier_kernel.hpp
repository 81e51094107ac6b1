// rcclx/host/detail/barrier_kernel.hpp: the communicator's device barrier: one block (or, on the
// host backend, the calling thread) crosses a start barrier on slot barrier_slot of the signal pads,
// which the communicator records as its own (core/slot_ranges.hpp): block 0 of its collectives,
// which run in the same stream order, shares it.
#pragma once

#include "../../core/barrier.hpp"
#include "../../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace host {
namespace detail {

inline constexpr int barrier_slot = 0;

#if RCCLX_BACKEND_GPU
template <int MaxRanks>
RCCLX_GLOBAL void barrier_kernel(core::signal_pads<MaxRanks> s) {
  (void)core::barrier(gpu::block_group{}, s, barrier_slot, core::barrier_kind::start);
}
#endif

// Enqueues a barrier of every rank on `stream`. A peer that never arrives leaves an error record
// in this rank's pad (bounded by s.timeout_ns).
template <int MaxRanks>
inline void launch_barrier(const core::signal_pads<MaxRanks>& s, gpu::stream_t stream) {
#if RCCLX_BACKEND_GPU
  // One thread per peer polls in parallel; a full wavefront on AMD.
  barrier_kernel<MaxRanks><<<1, 64, 0, stream>>>(s);
  gpu::check_launch("rcclx::host::communicator::barrier");
#else
  (void)stream;
  (void)core::barrier(gpu::thread_group{}, s, barrier_slot, core::barrier_kind::start);
#endif
}

}  // namespace detail
}  // namespace host
RCCLX_NAMESPACE_END
