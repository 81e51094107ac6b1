// rcclx/gpu/warp.hpp: the calling warp's (wavefront's) shuffles and vote, and a thread's index in a
// one-dimensional block: the vendor intrinsics a warp-level algorithm needs, for every backend.
//
//   const unsigned lane = rcclx::gpu::thread_x() % RCCLX_WARP_SIZE;
//   const float w = rcclx::gpu::shuffle(x, 0);               // lane 0's x, in every lane
//   const float o = rcclx::gpu::shuffle_xor(x, 1);           // the neighbour's x
//   if (rcclx::gpu::warp_any(failed)) ...                    // did any lane of the warp fail?
//
// Every lane of the warp calls a shuffle or the vote (all lanes active: the full mask on CUDA). On
// the host backend a warp is one thread: a shuffle returns the caller's own value, the vote its own
// answer, and the thread's index is 0.
#pragma once

#include "vendor.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// The calling thread's index in its block along x (threadIdx.x): its rank in a one-dimensional
// block, without block_group::thread_rank's y and z terms. Unsigned, as threadIdx.x: index
// arithmetic on it compiles as on threadIdx.x itself.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE unsigned thread_x() {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU
  return threadIdx.x;
#else
  return 0;
#endif
}

// x of lane `src` of the calling warp.
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle(T x, int src) {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_CUDA
  return __shfl_sync(0xFFFFFFFFu, x, src);
#elif RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_HIP
  return __shfl(x, src);
#else
  (void)src;  // a host pass: never more than one lane
  return x;
#endif
}

// x of lane (lane ^ mask) of the calling warp (the same mask in every lane).
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T shuffle_xor(T x, int mask) {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_CUDA
  return __shfl_xor_sync(0xFFFFFFFFu, x, mask);
#elif RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_HIP
  return __shfl_xor(x, mask);
#else
  (void)mask;
  return x;
#endif
}

// Did any lane of the calling warp pass true? (The same answer in every lane.)
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool warp_any(bool v) {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_CUDA
  return __any_sync(0xFFFFFFFFu, v) != 0;
#elif RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_HIP
  return __any(v ? 1 : 0) != 0;
#else
  return v;
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
