// rcclx/gpu/streaming.hpp: loads and stores of 1, 2 or 4 32-bit words (4, 8 or 16 bytes) with a
// cache hint, for kernels that stream data through once (the FP8 bulk kernels): the word-sized
// companions of gpu/memory.hpp's load16 / store16.
//
//   std::uint32_t w[4];
//   rcclx::gpu::load_words<rcclx::gpu::cache_hint::streaming>(src, w);  // ld.global.cs.v4 / nontemporal
//   rcclx::gpu::load_words_no_l1(src, w);                               // ld.global.L1::no_allocate.v4
//   rcclx::gpu::store_words<rcclx::gpu::cache_hint::streaming>(dst, w); // st.global.cs.v4 / nontemporal
//
// p is global memory aligned to the access (4, 8 or 16 bytes). Every load is coherent (never the
// read-only .nc path). The streaming and no-L1 loads carry no memory clobber, so the compiler may
// move ordinary memory accesses around them as around a plain load; streaming stores keep theirs.
#pragma once

#include <cstdint>
#include <cstring>

#include "memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

namespace detail {
template <int Words>
inline constexpr bool is_word_count = Words == 1 || Words == 2 || Words == 4;

// The default policy: one vector access (load16 for 16 bytes: ld.global.v4, never the read-only path).
template <int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_words_plain(const void* p, std::uint32_t (&w)[Words]) {
#if RCCLX_DEVICE_COMPILE
  if constexpr (Words == 4) {
    const vec16 v = load16(p);
#  pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = v.w[i];
  } else if constexpr (Words == 2) {
    const std::uint64_t v = *static_cast<const std::uint64_t*>(p);
    w[0] = static_cast<std::uint32_t>(v);
    w[1] = static_cast<std::uint32_t>(v >> 32);
  } else {
    w[0] = *static_cast<const std::uint32_t*>(p);
  }
#else
  std::memcpy(w, p, 4 * Words);
#endif
}

template <int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_words_plain(void* p, const std::uint32_t (&w)[Words]) {
#if RCCLX_DEVICE_COMPILE
  if constexpr (Words == 4) {
    vec16 v;
#  pragma unroll
    for (int i = 0; i < 4; ++i) v.w[i] = w[i];
    store16(p, v);
  } else if constexpr (Words == 2) {
    *static_cast<std::uint64_t*>(p) = static_cast<std::uint64_t>(w[0]) | (static_cast<std::uint64_t>(w[1]) << 32);
  } else {
    *static_cast<std::uint32_t*>(p) = w[0];
  }
#else
  std::memcpy(p, w, 4 * Words);
#endif
}
}  // namespace detail

// Words words at p. streaming: evict-first (ld.global.cs on NVIDIA, nontemporal loads on AMD).
template <cache_hint Hint, int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_words(const void* p, std::uint32_t (&w)[Words]) {
  static_assert(detail::is_word_count<Words>, "rcclx::gpu::load_words: 1, 2 or 4 words (4, 8 or 16 bytes)");
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  if constexpr (Hint == cache_hint::streaming) {
    if constexpr (Words == 4) {
      asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    } else if constexpr (Words == 2) {
      asm volatile("ld.global.cs.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    } else {
      asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
    }
    return;
  }
#elif RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  if constexpr (Hint == cache_hint::streaming) {
#  pragma unroll
    for (int i = 0; i < Words; ++i) w[i] = __builtin_nontemporal_load(static_cast<const std::uint32_t*>(p) + i);
    return;
  }
#endif
  detail::load_words_plain(p, w);
}

// Words words at p, not allocated in L1 (NVIDIA ld.global.L1::no_allocate: L2 only); a plain load
// elsewhere.
template <int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_words_no_l1(const void* p, std::uint32_t (&w)[Words]) {
  static_assert(detail::is_word_count<Words>, "rcclx::gpu::load_words_no_l1: 1, 2 or 4 words (4, 8 or 16 bytes)");
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  if constexpr (Words == 4) {
    asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
  } else if constexpr (Words == 2) {
    asm volatile("ld.global.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
  } else {
    asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
  }
#else
  detail::load_words_plain(p, w);
#endif
}

// Words words to p. streaming: evict-first (st.global.cs on NVIDIA, nontemporal stores on AMD).
template <cache_hint Hint, int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_words(void* p, const std::uint32_t (&w)[Words]) {
  static_assert(detail::is_word_count<Words>, "rcclx::gpu::store_words: 1, 2 or 4 words (4, 8 or 16 bytes)");
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  if constexpr (Hint == cache_hint::streaming) {
    if constexpr (Words == 4) {
      asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                   : "memory");
    } else if constexpr (Words == 2) {
      asm volatile("st.global.cs.v2.u32 [%0], {%1,%2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
    } else {
      asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(w[0]) : "memory");
    }
    return;
  }
#elif RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  if constexpr (Hint == cache_hint::streaming) {
#  pragma unroll
    for (int i = 0; i < Words; ++i) __builtin_nontemporal_store(w[i], static_cast<std::uint32_t*>(p) + i);
    return;
  }
#endif
  detail::store_words_plain(p, w);
}

}  // namespace gpu
RCCLX_NAMESPACE_END
