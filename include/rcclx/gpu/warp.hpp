// rcclx/gpu/warp.hpp: the calling warp's (wavefront's) shuffles and vote, and a thread's index in a
// one-dimensional block: the vendor intrinsics a warp-level algorithm needs, for every backend.
//
//   const unsigned lane = rcclx::gpu::thread_x() % RCCLX_WARP_SIZE;
//   const float w = rcclx::gpu::shuffle(x, 0);               // lane 0's x, in every lane
//   const float o = rcclx::gpu::shuffle_xor(x, 1);           // the neighbour's x
//   const std::uint32_t m = rcclx::gpu::shuffle_xor<2>(bits); // a mask known at compile time
//   if (rcclx::gpu::warp_any(failed)) ...                    // did any lane of the warp fail?
//
// Every lane of the warp calls a shuffle or the vote (all lanes active: the full mask on CUDA). On
// the host backend a warp is one thread: a shuffle returns the caller's own value, the vote its own
// answer, and the thread's index is 0; with RCCLX_EMULATE_THREADS=1 the lanes are the emulated
// block's fibers (RCCLX_WARP_SIZE of them) and a shuffle waits for every lane of the warp.
#pragma once

#include "vendor.hpp"
#if RCCLX_EMULATE_THREADS
#  include "emulated_block.hpp"
#endif

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// thread_x(): the calling thread's index in its block along x (threadIdx.x): its rank in a
// one-dimensional block, without block_group::thread_rank's y and z terms. Unsigned, as
// threadIdx.x: index arithmetic on it compiles as on threadIdx.x itself.
// shuffle(x, src): x of lane `src` of the calling warp. shuffle_xor(x, mask): x of lane
// (lane ^ mask), the same mask in every lane. warp_any(v): did any lane pass true (the same answer
// in every lane)?
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_CUDA
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned thread_x() { return threadIdx.x; }
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle(T x, int src) {
  return __shfl_sync(0xFFFFFFFFu, x, src);
}
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle_xor(T x, int mask) {
  return __shfl_xor_sync(0xFFFFFFFFu, x, mask);
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool warp_any(bool v) { return __any_sync(0xFFFFFFFFu, v) != 0; }
#elif RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_HIP
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned thread_x() { return threadIdx.x; }
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle(T x, int src) {
  return __shfl(x, src);
}
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle_xor(T x, int mask) {
  return __shfl_xor(x, mask);
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool warp_any(bool v) { return __any(v ? 1 : 0) != 0; }
#elif RCCLX_EMULATE_THREADS
// Emulated threads (gpu/emulated_block.hpp): the running fiber's lane; outside an emulated block,
// one lane per warp as below.
inline unsigned thread_x() {
  const auto* b = detail::current_emulated_block();
  return b ? static_cast<unsigned>(b->thread()) : 0u;
}
template <class T>
inline T shuffle(T x, int src) {
  auto* b = detail::current_emulated_block();
  return b ? b->shuffle(x, src) : x;
}
template <class T>
inline T shuffle_xor(T x, int mask) {
  auto* b = detail::current_emulated_block();
  return b ? b->shuffle_xor(x, mask) : x;
}
inline bool warp_any(bool v) {
  auto* b = detail::current_emulated_block();
  return b ? b->any(v) : v;
}
#else
// A host pass: one lane per warp, one thread per block.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned thread_x() { return 0; }
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle(T x, int) {
  return x;
}
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle_xor(T x, int) {
  return x;
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool warp_any(bool v) { return v; }
#endif

// shuffle_xor<Mask>(x): shuffle_xor(x, Mask) with the mask known at compile time and below 32 (so
// lane ^ Mask stays within the lane's aligned group of 32). On AMD it is a ds_swizzle in bit mode
// (and_mask 0x1F, xor_mask Mask): no address computation and no LDS allocation, unlike the
// ds_bpermute of a mask known only at run time. x is 4 bytes on AMD.
template <int Mask, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle_xor(T x) {
  static_assert(Mask > 0 && Mask < 32, "rcclx::gpu::shuffle_xor<Mask>: Mask must be in [1, 31]");
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_HIP
  static_assert(sizeof(T) == 4, "rcclx::gpu::shuffle_xor<Mask>: a 4-byte value (ds_swizzle moves one dword)");
  int v;
  __builtin_memcpy(&v, &x, 4);
  v = __builtin_amdgcn_ds_swizzle(v, (Mask << 10) | 0x1F);
  __builtin_memcpy(&x, &v, 4);
  return x;
#else
  return shuffle_xor(x, Mask);
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
