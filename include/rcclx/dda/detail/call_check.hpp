// rcclx/dda/detail/call_check.hpp: the checked mode's part of a DDA AllReduce call
// (core/call_check.hpp): its fingerprint, and the check every barrier protocol runs before it
// touches any output. Both compile to nothing without RCCLX_CHECKS.
#pragma once

#include <cstddef>

#include "../../core/call_check.hpp"
#include "../../core/ops.hpp"
#include "../../core/signal_pad.hpp"

RCCLX_NAMESPACE_BEGIN
namespace dda {
namespace detail {

#if RCCLX_CHECKS
// The checked mode's fingerprint of an AllReduce call.
template <class T, class ReduceOp, class Group>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE core::call_fingerprint allreduce_fingerprint(algorithm algo, std::size_t count,
                                                                                int num_blocks, const Group& g) {
  return core::fingerprint<T, ReduceOp>(core::checked_collective::allreduce, algo, count, num_blocks,
                                        static_cast<std::size_t>(g.size()));
}
#endif

#if RCCLX_CHECKS
// Group-collective, checked mode: publishes `fp` in pad slot `block` and compares every peer's (a
// mismatch is recorded); true when all agree. The dda collectives' call check, before any store.
template <class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool fingerprint_matches(const Group& g, const core::signal_pads<MaxRanks>& s,
                                                             int block, const core::call_fingerprint& fp) {
  const std::uint32_t cflag = core::check_begin(g, s, block, fp);
  return !g.sync_or(!core::check_verify(g, s, block, cflag, fp, block));
}
#endif

// Group-collective: true when every peer runs the same call (always without RCCLX_CHECKS); false,
// recorded, when one does not (leave the kernel). Before the first store: the output may be this
// rank's symmetric buffer, and it stays untouched.
template <class T, class ReduceOp, class Group, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool allreduce_call_matches(const Group& g, const core::signal_pads<MaxRanks>& s,
                                                                algorithm algo, std::size_t count, int block,
                                                                int num_blocks) {
#if RCCLX_CHECKS
  return fingerprint_matches(g, s, block, allreduce_fingerprint<T, ReduceOp>(algo, count, num_blocks, g));
#else
  (void)g, (void)s, (void)algo, (void)count, (void)block, (void)num_blocks;
  return true;
#endif
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
