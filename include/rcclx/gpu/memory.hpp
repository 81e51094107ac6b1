// rcclx/gpu/memory.hpp: 16-byte vector loads/stores, non-temporal variants, alignment utilities.
//
//   using v = rcclx::gpu::vec16;              // 16 bytes, 16-byte aligned
//   v x = rcclx::gpu::load16(src + i);        // one global_load_dwordx4 / ld.global.v4
//   rcclx::gpu::store16_nontemporal(dst + i, x);
//   x = rcclx::gpu::load16<rcclx::gpu::cache_hint::streaming>(src + i);  // the hint as a template argument
//
// Loads from peers' buffers must stay coherent (no read-only/texture path): a peer wrote them
// during this kernel, ordered by a system-scope acquire. Non-temporal loads are for data read once
// (streaming inputs); non-temporal stores for outputs the kernel will not read again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "vendor.hpp"
#if RCCLX_EMULATE_THREADS && RCCLX_CHECKS
#  include <cstdio>

#  include "../core/error.hpp"
#endif

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// A 16-byte vector as four 32-bit words; reinterpreted by callers as 8 bf16, 4 float, 16 fp8...
struct alignas(16) vec16 {
  std::uint32_t w[4];
};
static_assert(sizeof(vec16) == 16, "vec16 must be 16 bytes");

// Elements of T per 16-byte vector.
template <class T>
inline constexpr int elems_per_vec16 = static_cast<int>(16 / sizeof(T));

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool is_aligned(const void* p, std::size_t alignment) {
  return (reinterpret_cast<std::uintptr_t>(p) & (alignment - 1)) == 0;
}

// Cache policy of a load or store, for templates that take it as a parameter. streaming: the data
// is touched once (evict-first: ld/st.global.cs on NVIDIA, nontemporal on AMD), so it does not push
// out of L2 what a concurrent phase of the same kernel reuses, e.g. a GEMM main loop's operands
// while finished tiles are reduced (docs/fusion.md). normal: the default policy.
enum class cache_hint { normal, streaming };

#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
namespace detail {
// The NVIDIA 16-byte load of either policy, ld.global.v4 or ld.global.cs.v4: coherent, never the
// read-only .nc path (a peer may have written the data during this kernel).
template <cache_hint Hint>
RCCLX_DEVICE RCCLX_FORCEINLINE vec16 ld_global_v4(const void* p) {
  vec16 v;
  if constexpr (Hint == cache_hint::streaming)
    asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p)
                 : "memory");
  else
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.w[0]), "=r"(v.w[1]), "=r"(v.w[2]), "=r"(v.w[3])
                 : "l"(p)
                 : "memory");
  return v;
}
}  // namespace detail
#endif

#if RCCLX_EMULATE_THREADS && RCCLX_CHECKS
namespace detail {
// Emulated threads, checked mode: a 16-byte vector access must be 16-byte aligned, as on a GPU
// (where a misaligned one faults); on the host it would be a memcpy that works.
inline void check_vec16(const void* p, const char* what) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  if (a % 16 != 0) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "rcclx::gpu::%s: address %p is %u bytes past a 16-byte boundary (a 16-byte vector access needs "
                  "16-byte alignment: a GPU faults)",
                  what, p, static_cast<unsigned>(a % 16));
    throw error(errc::misaligned, buf);
  }
}
}  // namespace detail
#endif

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE vec16 load16(const void* p) {
#if RCCLX_EMULATE_THREADS && RCCLX_CHECKS
  detail::check_vec16(p, "load16");
#endif
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  return detail::ld_global_v4<cache_hint::normal>(p);
#elif RCCLX_BACKEND_GPU && RCCLX_DEVICE_COMPILE
  return *static_cast<const vec16*>(p);
#else
  vec16 v;
  std::memcpy(&v, p, 16);
  return v;
#endif
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store16(void* p, const vec16& v) {
#if RCCLX_EMULATE_THREADS && RCCLX_CHECKS
  detail::check_vec16(p, "store16");
#endif
#if RCCLX_BACKEND_GPU && RCCLX_DEVICE_COMPILE
  *static_cast<vec16*>(p) = v;
#else
  std::memcpy(p, &v, 16);
#endif
}

// Streaming load of data read once by this kernel. Coherent on every backend (ld.global.cs on
// NVIDIA, never the .nc read-only path), so it may also read peer buffers after an acquire.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE vec16 load16_nontemporal(const void* p) {
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  const auto* q = static_cast<const std::uint32_t*>(p);
  vec16 v;
  v.w[0] = __builtin_nontemporal_load(q + 0);
  v.w[1] = __builtin_nontemporal_load(q + 1);
  v.w[2] = __builtin_nontemporal_load(q + 2);
  v.w[3] = __builtin_nontemporal_load(q + 3);
  return v;
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  return detail::ld_global_v4<cache_hint::streaming>(p);
#else
  return load16(p);
#endif
}

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store16_nontemporal(void* p, const vec16& v) {
#if RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  auto* q = static_cast<std::uint32_t*>(p);
  __builtin_nontemporal_store(v.w[0], q + 0);
  __builtin_nontemporal_store(v.w[1], q + 1);
  __builtin_nontemporal_store(v.w[2], q + 2);
  __builtin_nontemporal_store(v.w[3], q + 3);
#elif RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.w[0]), "r"(v.w[1]),
               "r"(v.w[2]), "r"(v.w[3])
               : "memory");
#else
  store16(p, v);
#endif
}

template <cache_hint Hint>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE vec16 load16(const void* p) {
  if constexpr (Hint == cache_hint::streaming) return load16_nontemporal(p);
  else return load16(p);
}

template <cache_hint Hint>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store16(void* p, const vec16& v) {
  if constexpr (Hint == cache_hint::streaming) store16_nontemporal(p, v);
  else store16(p, v);
}

// Bit cast usable on host and device in C++17 (std::bit_cast is C++20).
template <class To, class From>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast needs equal sizes");
  To to;
  __builtin_memcpy(&to, &from, sizeof(To));  // std::memcpy may be host-only under HIP (see core/types.hpp)
  return to;
}

}  // namespace gpu
RCCLX_NAMESPACE_END
