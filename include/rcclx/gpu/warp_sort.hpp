// rcclx/gpu/warp_sort.hpp: one value per lane sorted across the calling warp (wavefront), by a
// bitonic network of shuffles: log2(W) (log2(W) + 1) / 2 exchanges (15 on 32 lanes, 21 on 64), no
// shared memory.
//
//   // every lane of the warp calls; lane i gets the i-th largest of the warp's values
//   const float m = rcclx::gpu::warp_sort<float>().descending(x);
//
// On the host backend a warp is one thread and the value is returned as it is. Float compares by
// fmaxf / fminf, which drop a NaN (the other value wins): map NaNs first where they must count
// (e.g. to +inf). Other types compare with `<`.
#pragma once

#include <type_traits>

#include "group.hpp"
#include "warp.hpp"

RCCLX_NAMESPACE_BEGIN
namespace gpu {

// WarpThreads: the warp's width (a power of two; the device's by default).
template <class T, int WarpThreads = RCCLX_WARP_SIZE>
struct warp_sort {
  static_assert(WarpThreads >= 1 && (WarpThreads & (WarpThreads - 1)) == 0,
                "rcclx::gpu::warp_sort: WarpThreads must be a power of two");

  // Lane i returns the i-th largest value (ties in any order).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T descending(T x) const { return sort<true>(x); }
  // Lane i returns the i-th smallest value.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T ascending(T x) const { return sort<false>(x); }

 private:
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static T larger(T a, T b) {
    if constexpr (std::is_same<T, float>::value) return fmaxf(a, b);
    else return a < b ? b : a;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static T smaller(T a, T b) {
    if constexpr (std::is_same<T, float>::value) return fminf(a, b);
    else return b < a ? b : a;
  }

  // Stage k merges sorted runs of k / 2 into runs of k; exchange j compares lanes j apart. A lane
  // keeps the larger value where its direction (lane & k) agrees with its side (lane & j).
  template <bool Largest>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE static T sort(T x) {
#if (RCCLX_DEVICE_COMPILE && RCCLX_BACKEND_GPU) || RCCLX_EMULATE_THREADS  // lanes that exchange
    if constexpr (WarpThreads > 1) {
      const int lane = block_group{}.thread_rank() % WarpThreads;
      for (int k = 2; k <= WarpThreads; k *= 2)
        for (int j = k / 2; j > 0; j /= 2) {
          const T o = shuffle_xor(x, j);
          x = (((lane & j) == 0) == ((lane & k) == 0)) == Largest ? larger(x, o) : smaller(x, o);
        }
    }
#endif
    return x;
  }
};

}  // namespace gpu
RCCLX_NAMESPACE_END
