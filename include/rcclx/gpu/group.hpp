// rcclx/gpu/group.hpp: who cooperates on a piece of work: a thread block, a warp, or (on the host
// backend) one thread. Collectives are written once against this interface.
//
//   rcclx::gpu::block_group g;          // inside a kernel
//   for (auto i = g.thread_rank(); i < n; i += g.size()) ...;
//   g.sync();
//   bool any_failed = g.sync_or(my_failed);
#pragma once

#include "vendor.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

#if RCCLX_BACKEND_GPU

// All threads of the calling thread block (1-D view of a block of any shape).
struct block_group {
  RCCLX_DEVICE RCCLX_FORCEINLINE int thread_rank() const {
    return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  }
  RCCLX_DEVICE RCCLX_FORCEINLINE int size() const {
    return static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
  }
  RCCLX_DEVICE RCCLX_FORCEINLINE void sync() const { __syncthreads(); }
  // Barrier that also tells every thread whether any thread passed true.
  RCCLX_DEVICE RCCLX_FORCEINLINE bool sync_or(bool v) const { return __syncthreads_or(v ? 1 : 0) != 0; }
};

// The calling warp (wavefront). Threads of a warp must call together.
struct warp_group {
  RCCLX_DEVICE RCCLX_FORCEINLINE int thread_rank() const {
    return block_group{}.thread_rank() % RCCLX_WARP_SIZE;
  }
  RCCLX_DEVICE RCCLX_FORCEINLINE constexpr int size() const { return RCCLX_WARP_SIZE; }
  RCCLX_DEVICE RCCLX_FORCEINLINE void sync() const {
#  if RCCLX_BACKEND_CUDA
    __syncwarp();
#  else
    __builtin_amdgcn_wave_barrier();
#  endif
  }
  RCCLX_DEVICE RCCLX_FORCEINLINE bool sync_or(bool v) const {
#  if RCCLX_BACKEND_CUDA
    return __any_sync(0xffffffffu, v) != 0;
#  else
    return __any(v ? 1 : 0) != 0;
#  endif
  }
};

using default_group = block_group;

#endif  // RCCLX_BACKEND_GPU

// One host thread: the unit of work on the host backend (a rank's "block" is a std::thread).
// Also usable from host code of GPU builds, for reference paths.
struct thread_group {
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE constexpr int thread_rank() const { return 0; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE constexpr int size() const { return 1; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void sync() const {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool sync_or(bool v) const { return v; }
};

#if RCCLX_BACKEND_HOST
using default_group = thread_group;
#endif

#if !RCCLX_BACKEND_GPU
namespace detail {
// The block count of the launch the calling host thread runs a block of (run_host_blocks sets it,
// launch_emulated narrows it to one rank's blocks); 0 outside a launch.
inline int& host_launch_blocks() {
  thread_local int n = 0;
  return n;
}
}  // namespace detail
#endif

// Blocks of one rank's grid in the current launch: gridDim.x * gridDim.y on GPUs (launch_emulated
// puts its ranks in z), the blocks of the current run_host_blocks launch (of one rank under
// launch_emulated) on the host backend; 0 where unknown. The checked mode uses it (a tile
// AllReduce call's blocks).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int launch_blocks() {
#if RCCLX_DEVICE_COMPILE
  return static_cast<int>(gridDim.x * gridDim.y);
#elif RCCLX_BACKEND_GPU
  return 0;
#else
  return detail::host_launch_blocks();
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
