// rcclx/core/peer_table.hpp: the device handle of a collective: every rank's symmetric buffer and
// the signal pads, as seen from one rank. Trivially copyable; kernels take it by value (or, for
// graphs patched after capture, read it from device memory through a pointer).
//
//   rcclx::core::peer_table<rcclx::bf16, 8> t = world.table<rcclx::bf16>(rank);
//   const rcclx::bf16* peer_buf = t.data[(t.rank() + 1) % t.num_ranks()];
//   if (!rcclx::core::barrier(g, t.signals, block, rcclx::core::barrier_kind::start)) return;
#pragma once

#include <cstddef>
#include <type_traits>

#include "signal_pad.hpp"

RCCLX_NAMESPACE_BEGIN
namespace core {

template <class T, int MaxRanks = max_ranks>
struct peer_table {
  using value_type = T;
  static constexpr int max_ranks_v = MaxRanks;

  T* data[MaxRanks];               // symmetric buffer of each rank, mapped here
  std::size_t capacity_bytes;      // bytes each buffer holds (the same on every rank)
  signal_pads<MaxRanks> signals;

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int rank() const { return signals.rank; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int num_ranks() const { return signals.num_ranks; }
  // Elements of T each buffer holds.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t capacity() const { return capacity_bytes / sizeof(T); }

  // The same buffers viewed as another element type (the layout does not depend on T).
  template <class U>
  RCCLX_HOST_DEVICE peer_table<U, MaxRanks> as() const {
    peer_table<U, MaxRanks> t{};
    for (int p = 0; p < MaxRanks; ++p) t.data[p] = reinterpret_cast<U*>(data[p]);
    t.capacity_bytes = capacity_bytes;
    t.signals = signals;
    return t;
  }
};

static_assert(std::is_trivially_copyable<peer_table<float, 8>>::value, "device handles are passed by value");
static_assert(sizeof(peer_table<float, 8>) <= 256, "peer_table<T, 8> must stay a small kernel argument");

}  // namespace core
RCCLX_NAMESPACE_END
