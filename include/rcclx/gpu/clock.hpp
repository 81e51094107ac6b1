// rcclx/gpu/clock.hpp: a wall-clock in nanoseconds usable inside kernels, for bounded waits.
//
//   std::uint64_t t0 = rcclx::gpu::clock_ns();
//   while (!ready()) if (rcclx::gpu::clock_ns() - t0 > limit_ns) return timeout;
//
// AMD gfx9: s_memrealtime, a constant 100 MHz counter (independent of shader clock).
// NVIDIA: %globaltimer (ns; updates every ~1 us on recent GPUs, enough for timeouts).
// Host: std::chrono::steady_clock.
#pragma once

#include <cstdint>

#include "vendor.hpp"

#if RCCLX_BACKEND_HOST || !RCCLX_DEVICE_COMPILE
#  include <chrono>
#  include <thread>
#endif
#if RCCLX_EMULATE_THREADS
#  include "emulated_block.hpp"
#endif

RCCLX_NAMESPACE_BEGIN
namespace gpu {

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint64_t clock_ns() {
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  return __builtin_amdgcn_s_memrealtime() * 10ull;  // 100 MHz on gfx90a/gfx94x/gfx950
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#else
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
#endif
}

// Hint inside spin loops: back off on GPUs, give the core away on the host (ranks are threads
// and CI has two cores); with emulated threads, to the block's other threads first.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void spin_pause() {
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  __builtin_amdgcn_s_sleep(1);
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
#  if __CUDA_ARCH__ >= 700
  __nanosleep(32);
#  endif
#elif RCCLX_EMULATE_THREADS
  // The other threads of an emulated block run first (a waiting thread never starves its block).
  if (auto* b = detail::current_emulated_block()) b->yield();
  else std::this_thread::yield();
#else
  std::this_thread::yield();
#endif
}

}  // namespace gpu
RCCLX_NAMESPACE_END
