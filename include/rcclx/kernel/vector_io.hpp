// rcclx/kernel/vector_io.hpp: 16-byte vector access with an alignment fallback, the peers'
// buffers as a pointer array, and the owned-vector copy every collective's phases use. Part of
// rcclx/kernel/: internal but shared by the collectives; readable, not a public API.
//
//   const rcclx::kernel::peer_ptrs<float, 8> src(table);         // every rank's buffer, copied once
//   rcclx::gpu::vec16 v = rcclx::kernel::load_vec(user_in + off, in_aligned);
//   rcclx::kernel::copy_owned(l, tid, {0, l.tiles}, input, own_buffer);            // one destination
//   rcclx::kernel::copy_owned(l, tid, {0, l.tiles}, input, output_block, own);     // two, one pass
//
// Symmetric buffers are allocation bases (16-byte aligned, checked by the host launchers); a user's
// input or output may be aligned only to sizeof(T), then it is accessed element by element (the
// `aligned` flag is the same for a whole call, so the choice is uniform across the group).
#pragma once

#include <cstddef>

#include "../core/peer_table.hpp"
#include "../gpu/memory.hpp"
#include "layout.hpp"

RCCLX_NAMESPACE_BEGIN
namespace kernel {

template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 load_vec(const T* p, bool aligned) {
  if (RCCLX_LIKELY(aligned)) return gpu::load16(p);
  constexpr int e = gpu::elems_per_vec16<T>;
  T tmp[e];
  for (int i = 0; i < e; ++i) tmp[i] = p[i];
  gpu::vec16 v;
  __builtin_memcpy(&v, tmp, 16);
  return v;
}

template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_vec(T* p, const gpu::vec16& v, bool aligned) {
  if (RCCLX_LIKELY(aligned)) {
    gpu::store16(p, v);
    return;
  }
  constexpr int e = gpu::elems_per_vec16<T>;
  T tmp[e];
  __builtin_memcpy(tmp, &v, 16);
  for (int i = 0; i < e; ++i) p[i] = tmp[i];
}

// The partial vector at vector index pv: its `elems` elements, zero-padded to 16 bytes.
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 load_partial(const T* src, std::size_t pv, int elems) {
  constexpr int e = gpu::elems_per_vec16<T>;
  gpu::vec16 v{};
  // A constant trip count with the bound as a condition: constant byte offsets, so v stays in
  // registers (a loop up to `elems` indexes v dynamically and puts it in scratch).
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
  for (int i = 0; i < e; ++i)
    if (i < elems) __builtin_memcpy(reinterpret_cast<unsigned char*>(&v) + i * sizeof(T), src + pv * e + i, sizeof(T));
  return v;
}

template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_partial(T* dst, std::size_t pv, int elems, const gpu::vec16& v) {
  constexpr int e = gpu::elems_per_vec16<T>;
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
  for (int i = 0; i < e; ++i)
    if (i < elems) __builtin_memcpy(dst + pv * e + i, reinterpret_cast<const unsigned char*>(&v) + i * sizeof(T), sizeof(T));
}

// Every rank's buffer, copied out of the table once per phase: the table may live in global memory
// (emulated ranks, graphs), where the compiler would otherwise reload each pointer after every store
// it cannot prove unrelated, putting a dependent load in front of every peer load.
template <class T, int MaxRanks>
struct peer_ptrs {
  const T* p[MaxRanks];
  int n;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE explicit peer_ptrs(const core::peer_table<T, MaxRanks>& t) : n(t.num_ranks()) {
    for (int j = 0; j < MaxRanks; ++j) p[j] = j < n ? t.data[j] : nullptr;
  }
};

namespace detail {
// Copies the owned vectors of tiles r from src to each of the N destinations (4 vectors in flight
// per thread; the stores of a vector go to dst[0], dst[1], ... in order).
template <int N, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_owned_to(const layout<T>& l, int tid, tile_range r, const T* src,
                                                       T* const (&dst)[N]) {
  constexpr int unroll = 4;
  constexpr int e = layout<T>::vec_elems;
  const bool src_aligned = gpu::is_aligned(src, 16);
  bool dst_aligned[N];
  for (int d = 0; d < N; ++d) dst_aligned[d] = gpu::is_aligned(dst[d], 16);
  for_each_owned<unroll>(
      l, tid, r,
      [&](const std::size_t(&vi)[unroll], const bool(&ok)[unroll]) {
        gpu::vec16 v[unroll] = {};
        for (int j = 0; j < unroll; ++j)
          if (ok[j]) v[j] = load_vec(src + vi[j] * e, src_aligned);
        for (int j = 0; j < unroll; ++j)
          if (ok[j])
            for (int d = 0; d < N; ++d) store_vec(dst[d] + vi[j] * e, v[j], dst_aligned[d]);
      },
      [&](std::size_t pv) {
        for (int i = 0; i < l.partial_elems(); ++i) {
          const T x = src[pv * e + i];
          for (int d = N - 1; d >= 0; --d) dst[d][pv * e + i] = x;
        }
      });
}
}  // namespace detail

// Copies the owned vectors of tiles r from src to dst (4 vectors in flight per thread).
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_owned(const layout<T>& l, int tid, tile_range r, const T* src, T* dst) {
  constexpr int unroll = 4;
  constexpr int e = layout<T>::vec_elems;
  const bool src_aligned = gpu::is_aligned(src, 16), dst_aligned = gpu::is_aligned(dst, 16);
  for_each_owned<unroll>(
      l, tid, r,
      [&](const std::size_t(&vi)[unroll], const bool(&ok)[unroll]) {
        gpu::vec16 v[unroll] = {};
        for (int j = 0; j < unroll; ++j)
          if (ok[j]) v[j] = load_vec(src + vi[j] * e, src_aligned);
        for (int j = 0; j < unroll; ++j)
          if (ok[j]) store_vec(dst + vi[j] * e, v[j], dst_aligned);
      },
      [&](std::size_t pv) {
        for (int i = 0; i < l.partial_elems(); ++i) dst[pv * e + i] = src[pv * e + i];
      });
}

// The same into dst and dst2 in one pass (one load, two stores), or into dst alone when dst2 is null.
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_owned(const layout<T>& l, int tid, tile_range r, const T* src, T* dst,
                                                    T* dst2) {
  if (!dst2) {
    copy_owned(l, tid, r, src, dst);
    return;
  }
  T* const to[2] = {dst, dst2};
  detail::copy_owned_to(l, tid, r, src, to);
}

}  // namespace kernel
RCCLX_NAMESPACE_END
