// rcclx/gpu/bits.hpp: bit counts of a 64-bit mask, with the vendor's instruction on GPUs and the
// compiler's builtin elsewhere (one instruction or a short sequence; no loop).
//
//   for (std::uint64_t m = mask; m != 0; m &= m - 1) use(rcclx::gpu::lowest_set_bit(m));
//   const int n = rcclx::gpu::popcount(mask);
#pragma once

#include <cstdint>

#include "vendor.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// Set bits of x.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int popcount(std::uint64_t x) {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU
  return __popcll(x);
#else
  return __builtin_popcountll(x);
#endif
}

// Position of the lowest set bit of x (x != 0).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int lowest_set_bit(std::uint64_t x) {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU
  return __ffsll(static_cast<long long>(x)) - 1;
#else
  return __builtin_ctzll(x);
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
