// rcclx/gpu/shared.hpp: block-shared storage from code that is compiled for the host backend too:
// `__shared__` memory on GPUs, one per-thread copy on the host backend (where a block is a thread;
// with RCCLX_EMULATE_THREADS=1 the copy of the OS thread whose fibers are the block's threads).
//
//   float (&a)[16][64] = rcclx::gpu::block_shared<float[16][64], struct a_tile_tag>();
//   auto& tmp = rcclx::gpu::block_shared<rcclx::gpu::block_reduce<float, 256>::storage_type,
//                                        struct norm_tag>();
//
// Why a function: a `__shared__` declaration may not appear in a __host__ __device__ body (nvcc
// rejects it in the host pass), yet rcclx kernels are written once for GPUs and the host backend.
// Every (S, Tag) pair names one object per block: two calls with the same pair share it, so give
// each buffer its own Tag (an incomplete local struct is enough). S must be trivially
// constructible (shared memory is never initialised): arrays, CUB/rocPRIM temp storage.
#pragma once

#include <type_traits>

#include "vendor.hpp"
#if RCCLX_EMULATE_THREADS
#  include <cstdint>

#  include "emulated_block.hpp"
#endif

RCCLX_NAMESPACE_BEGIN
namespace gpu {

template <class S, class Tag>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE S& block_shared() {
  static_assert(std::is_trivially_default_constructible<S>::value,
                "rcclx::gpu::block_shared: S must be trivially constructible (shared memory is not initialised)");
#if RCCLX_DEVICE_COMPILE
  __shared__ S storage;
  return storage;
#elif RCCLX_EMULATE_THREADS
  // Emulated threads: one object per OS thread, so per block (its threads are fibers of it), with a
  // guard after it that the block checks when its threads have returned (gpu/emulated_block.hpp).
  struct guarded {
    S storage;
    unsigned char guard[detail::emulated_block::guard_bytes];
  };
  thread_local guarded g;
  thread_local std::uint64_t generation = 0;
  if (auto* b = detail::current_emulated_block()) {
    const detail::tsan_ignore scheduler;  // the guard's bookkeeping is not the kernel's memory
    if (generation != b->generation()) {
      generation = b->generation();
      b->watch(g.guard, sizeof(S), __PRETTY_FUNCTION__);
    }
  }
  return g.storage;
#else
  thread_local S storage;  // host backend: one block = one thread (pooled: starts with what the last block left)
  return storage;
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
