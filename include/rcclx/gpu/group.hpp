// rcclx/gpu/group.hpp: who cooperates on a piece of work: a thread block, a warp, or (on the host
// backend) one thread. Collectives are written once against this interface.
//
//   rcclx::gpu::block_group g;          // inside a kernel
//   for (auto i = g.thread_rank(); i < n; i += g.size()) ...;
//   g.sync();
//   bool any_failed = g.sync_or(my_failed);
#pragma once

#include <cstdint>

#include "vendor.hpp"
#if RCCLX_EMULATE_THREADS
#  include "emulated_block.hpp"
#endif

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

#elif RCCLX_EMULATE_THREADS

// Emulated threads (host backend, gpu/emulated_block.hpp): the block's threads are fibers of the
// OS thread that runs the block. Outside an emulated block (a kernel::launch body, host code) the
// group is the calling thread alone.
struct block_group {
  int thread_rank() const {
    const auto* b = detail::current_emulated_block();
    return b ? b->thread() : 0;
  }
  int size() const {
    const auto* b = detail::current_emulated_block();
    return b ? b->threads() : 1;
  }
  // file and line name the sync in the error a divergent sync ends in (its call site).
  void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const { (void)sync_or(false, file, line); }
  bool sync_or(bool v, const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
    auto* b = detail::current_emulated_block();
    return b ? b->sync(v, file, line) : v;
  }
};

struct warp_group {
  int thread_rank() const { return block_group{}.thread_rank() % RCCLX_WARP_SIZE; }
  int size() const {
    const int n = block_group{}.size(), base = block_group{}.thread_rank() / RCCLX_WARP_SIZE * RCCLX_WARP_SIZE;
    return n - base < RCCLX_WARP_SIZE ? n - base : RCCLX_WARP_SIZE;
  }
  void sync() const { (void)sync_or(false); }
  bool sync_or(bool v) const {
    auto* b = detail::current_emulated_block();
    return b ? b->any(v) : v;
  }
};

using default_group = block_group;

#endif  // RCCLX_BACKEND_GPU / RCCLX_EMULATE_THREADS

// One host thread: the unit of work on the host backend (a rank's "block" is a std::thread).
// Also usable from host code of GPU builds, for reference paths.
struct thread_group {
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE constexpr int thread_rank() const { return 0; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE constexpr int size() const { return 1; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void sync() const {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool sync_or(bool v) const { return v; }
};

#if RCCLX_BACKEND_HOST && !RCCLX_EMULATE_THREADS
using default_group = thread_group;
#endif

#if !RCCLX_BACKEND_GPU
namespace detail {
// The identity of the launch the calling host thread runs a block of (run_host_blocks sets it);
// 0 outside a launch.
inline std::uint32_t& host_launch_id() {
  thread_local std::uint32_t id = 0;
  return id;
}
// The calling host thread's block index in its launch and the blocks of its grid (0: unknown),
// set by run_host_blocks.
inline int& host_block_id() {
  thread_local int id = 0;
  return id;
}
inline int& host_grid_blocks() {
  thread_local int n = 0;
  return n;
}
}  // namespace detail
#endif

// An identity of the current kernel launch: the same in every block of one launch, different in
// the next launch (low 32 bits of the grid id on NVIDIA, the dispatch packet's ring slot on AMD, a
// launch counter on the host backend); 0 where unknown (host code of a GPU build). The checked mode uses
// it to tell a new call from a second object of the same call (a tile AllReduce's missing finish()).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t launch_id() {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_CUDA
  unsigned long long id;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(id));
  return static_cast<std::uint32_t>(id);
#elif RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_HIP
  // The AQL dispatch packet's slot in its queue's ring (64-byte packets): consecutive launches on a
  // queue use consecutive slots.
  return static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(__builtin_amdgcn_dispatch_ptr()) >> 6);
#elif RCCLX_BACKEND_GPU
  return 0;
#else
  return detail::host_launch_id();
#endif
}

// The calling block's linear index in its grid (blockIdx.x + gridDim.x * blockIdx.y; a launch's
// ranks in z, as the emulated launches place them, keep their own numbering), and the blocks of
// that grid (gridDim.x * gridDim.y; 0 where unknown: host code of a GPU build, or a host launch
// that did not say). The checked mode names blocks with them and compares finish()'s count.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int block_id() {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU
  return static_cast<int>(blockIdx.x + gridDim.x * blockIdx.y);
#elif RCCLX_BACKEND_GPU
  return 0;
#else
  return detail::host_block_id();
#endif
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int grid_blocks() {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU
  return static_cast<int>(gridDim.x * gridDim.y);
#elif RCCLX_BACKEND_GPU
  return 0;
#else
  return detail::host_grid_blocks();
#endif
}
// Is the calling thread its block's first (thread 0 in every dimension)? Always true on the host
// (with emulated threads: thread 0 of an emulated block).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool first_thread_of_block() {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU
  return (threadIdx.x | threadIdx.y | threadIdx.z) == 0;
#elif RCCLX_EMULATE_THREADS
  const auto* b = detail::current_emulated_block();
  return !b || b->thread() == 0;
#else
  return true;
#endif
}

// Is the calling thread its block's last (the highest index in every dimension)? Always true on the
// host (with emulated threads: the emulated block's last thread).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool last_thread_of_block() {
#if RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU
  return threadIdx.x + 1 == blockDim.x && threadIdx.y + 1 == blockDim.y && threadIdx.z + 1 == blockDim.z;
#elif RCCLX_EMULATE_THREADS
  const auto* b = detail::current_emulated_block();
  return !b || b->thread() + 1 == b->threads();
#else
  return true;
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
