// rcclx/gpu/atomic.hpp: scoped atomics on 32/64-bit words for flags and counters.
// System scope for anything a peer (another GPU, another process) reads or writes.
//
//   rcclx::gpu::store_release_system(&peer_flag, epoch);
//   while (rcclx::gpu::load_acquire_system(&my_flag) != epoch) {}
//
// AMD: __hip_atomic_* with system scope (gfx942 ISA: `sc0 sc1` on the access, `buffer_wbl2` before
// a release store and `buffer_inv sc0 sc1` after an acquire load).
// NVIDIA: ld.acquire.sys / st.release.sys (sm_70+).
// Host: __atomic builtins (ThreadSanitizer understands them).
// No peer read-modify-write atomics are offered at system scope: they do not work across PCIe.
#pragma once

#include <cstdint>

#include "vendor.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// ---- system scope -----------------------------------------------------------------------------

// The order of a flag access: relaxed, acquire (loads) or release (stores).
enum class memory_order { relaxed, acquire, release };

#if !(RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE)
namespace detail {
// The __atomic / __hip_atomic builtins' spelling of an order.
RCCLX_HOST_DEVICE constexpr int builtin_order(memory_order o) {
  return o == memory_order::acquire   ? __ATOMIC_ACQUIRE
         : o == memory_order::release ? __ATOMIC_RELEASE
                                      : __ATOMIC_RELAXED;
}
}  // namespace detail
#endif

template <memory_order Order>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t load_system(const std::uint32_t* p) {
  static_assert(Order != memory_order::release, "a load is relaxed or acquire");
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  return __hip_atomic_load(p, detail::builtin_order(Order), RCCLX_DETAIL_HIP_FLAG_SCOPE);
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  std::uint32_t v;
  if constexpr (Order == memory_order::acquire)
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#else
  return __atomic_load_n(p, detail::builtin_order(Order));
#endif
}

template <memory_order Order>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_system(std::uint32_t* p, std::uint32_t v) {
  static_assert(Order != memory_order::acquire, "a store is relaxed or release");
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  __hip_atomic_store(p, v, detail::builtin_order(Order), RCCLX_DETAIL_HIP_FLAG_SCOPE);
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  if constexpr (Order == memory_order::release)
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#else
  __atomic_store_n(p, v, detail::builtin_order(Order));
#endif
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t load_acquire_system(const std::uint32_t* p) {
  return load_system<memory_order::acquire>(p);
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t load_relaxed_system(const std::uint32_t* p) {
  return load_system<memory_order::relaxed>(p);
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_release_system(std::uint32_t* p, std::uint32_t v) {
  store_system<memory_order::release>(p, v);
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_relaxed_system(std::uint32_t* p, std::uint32_t v) {
  store_system<memory_order::relaxed>(p, v);
}

// ---- 16-byte packets of two 64-bit words ------------------------------------------------------
// Each 64-bit word is single-copy atomic (the LL protocol puts data and flag in one word: a reader
// sees both or neither); the two words of a packet carry no order between them. No fence, no
// acquire: the flag travels with the data. NVIDIA: one ld/st.relaxed.sys.v2.u64 (PTX treats a
// vector access as one access per element: 64-bit elements keep each word atomic). AMD: two 64-bit
// atomics at system scope. Host: two __atomic accesses.

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_packet_system(void* p, std::uint64_t lo, std::uint64_t hi) {
  auto* q = static_cast<std::uint64_t*>(p);
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  __hip_atomic_store(q, lo, __ATOMIC_RELAXED, RCCLX_DETAIL_HIP_FLAG_SCOPE);
  __hip_atomic_store(q + 1, hi, __ATOMIC_RELAXED, RCCLX_DETAIL_HIP_FLAG_SCOPE);
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  asm volatile("st.relaxed.sys.global.v2.u64 [%0], {%1, %2};" ::"l"(q), "l"(lo), "l"(hi) : "memory");
#else
  __atomic_store_n(q, lo, __ATOMIC_RELAXED);
  __atomic_store_n(q + 1, hi, __ATOMIC_RELAXED);
#endif
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_packet_system(const void* p, std::uint64_t& lo, std::uint64_t& hi) {
  const auto* q = static_cast<const std::uint64_t*>(p);
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  lo = __hip_atomic_load(q, __ATOMIC_RELAXED, RCCLX_DETAIL_HIP_FLAG_SCOPE);
  hi = __hip_atomic_load(q + 1, __ATOMIC_RELAXED, RCCLX_DETAIL_HIP_FLAG_SCOPE);
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  asm volatile("ld.relaxed.sys.global.v2.u64 {%0, %1}, [%2];" : "=l"(lo), "=l"(hi) : "l"(q) : "memory");
#else
  lo = __atomic_load_n(q, __ATOMIC_RELAXED);
  hi = __atomic_load_n(q + 1, __ATOMIC_RELAXED);
#endif
}

// ---- device (agent) scope: words only this GPU / process touches ------------------------------

// Compare-and-swap on a word owned by the calling rank (its own error record). Returns the old value.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t compare_exchange_local(std::uint32_t* p,
                                                                       std::uint32_t expected,
                                                                       std::uint32_t desired) {
#if RCCLX_BACKEND_GPU && RCCLX_DEVICE_COMPILE
  return atomicCAS(p, expected, desired);
#else
  __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return expected;
#endif
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t fetch_add_local(std::uint32_t* p, std::uint32_t v) {
#if RCCLX_BACKEND_GPU && RCCLX_DEVICE_COMPILE
  return atomicAdd(p, v);
#else
  return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
#endif
}

// Exchange on a word owned by the calling rank (the checked mode's audit words). Returns the old value.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t exchange_local(std::uint32_t* p, std::uint32_t v) {
#if RCCLX_BACKEND_GPU && RCCLX_DEVICE_COMPILE
  return atomicExch(p, v);
#else
  return __atomic_exchange_n(p, v, __ATOMIC_ACQ_REL);
#endif
}

// Atomic or on a word owned by the calling rank. Returns the old value.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t fetch_or_local(std::uint32_t* p, std::uint32_t v) {
#if RCCLX_BACKEND_GPU && RCCLX_DEVICE_COMPILE
  return atomicOr(p, v);
#else
  return __atomic_fetch_or(p, v, __ATOMIC_ACQ_REL);
#endif
}

// Atomic xor on a word owned by the calling rank (the checked mode's input hashes). Returns the old value.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t fetch_xor_local(std::uint32_t* p, std::uint32_t v) {
#if RCCLX_BACKEND_GPU && RCCLX_DEVICE_COMPILE
  return atomicXor(p, v);
#else
  return __atomic_fetch_xor(p, v, __ATOMIC_ACQ_REL);
#endif
}

// Full fence at system scope (orders a thread's earlier writes before later ones for peers).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void fence_system() {
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  __threadfence_system();
#else
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
#endif
}

// Wrap-around-safe "a has reached b" for 32-bit monotonic counters: true when a - b, taken as a
// signed 32-bit difference, is >= 0. Valid while the two never drift 2^31 apart (peers are at most
// one barrier ahead of each other).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool counter_reached(std::uint32_t a, std::uint32_t b) {
  return static_cast<std::int32_t>(a - b) >= 0;
}

}  // namespace gpu
RCCLX_NAMESPACE_END
