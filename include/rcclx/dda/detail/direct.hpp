// rcclx/dda/detail/direct.hpp: the loops of the one-shot AllGather, AlltoAll and ReduceScatter, on
// top of the tile partition of dda/detail/tiles.hpp (tile t of a range belongs to block
// t % num_blocks in every phase, so block b only reads what block b of a peer wrote):
//   copy_owned2      one source, two destinations (own symmetric buffer and own output block)
//   gather_owned     one vector from each of up to MaxRanks sources, all loads in flight, each
//                    stored to its own destination (AllGather, AlltoAll)
//   reduce_owned_from the reduction of dda/detail/tiles.hpp over arbitrary source pointers
//                    (ReduceScatter: chunk r of every rank), with an unaligned fallback
// Chunk offsets (r * count / N elements) need not be 16-byte aligned: `aligned` flags select the
// element-by-element path for a whole call, so the choice is uniform across the group.
#pragma once

#include <cstddef>

#include "tiles.hpp"

#if RCCLX_DEVICE_COMPILE && (defined(__clang__) || defined(__CUDA_ARCH__))
#  define RCCLX_DETAIL_DDA_UNROLL _Pragma("unroll")
#else
#  define RCCLX_DETAIL_DDA_UNROLL
#endif

RCCLX_NAMESPACE_BEGIN
namespace dda {
namespace detail {

// Copies the owned vectors of tiles r from src to dst and, when dst2 is not null, to dst2 too.
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_owned2(const layout<T>& l, int tid, tile_range r, const T* src, T* dst,
                                                     T* dst2) {
  if (!dst2) {
    copy_owned(l, tid, r, src, dst);
    return;
  }
  constexpr int unroll = 4;
  constexpr int e = layout<T>::vec_elems;
  const bool src_aligned = gpu::is_aligned(src, 16), dst_aligned = gpu::is_aligned(dst, 16),
             dst2_aligned = gpu::is_aligned(dst2, 16);
  for_each_owned<unroll>(
      l, tid, r,
      [&](const std::size_t(&vi)[unroll], const bool(&ok)[unroll]) {
        gpu::vec16 v[unroll] = {};
        for (int j = 0; j < unroll; ++j)
          if (ok[j]) v[j] = load_vec(src + vi[j] * e, src_aligned);
        for (int j = 0; j < unroll; ++j) {
          if (ok[j]) {
            store_vec(dst + vi[j] * e, v[j], dst_aligned);
            store_vec(dst2 + vi[j] * e, v[j], dst2_aligned);
          }
        }
      },
      [&](std::size_t pv) {
        for (int i = 0; i < l.partial_elems(); ++i) dst[pv * e + i] = dst2[pv * e + i] = src[pv * e + i];
      });
}

// Entry j: read from src[j], write to dst[j] (element offsets added by the loop); entries with a
// null src are skipped (the rank's own step of a mesh schedule).
template <class T, int MaxRanks>
struct gather_list {
  const T* src[MaxRanks];
  T* dst[MaxRanks];
  int n;
};

// For every owned vector: the loads of all n entries are issued (in batches of up to 8, in list
// order) before any store, so n x 16 bytes are in flight per thread.
template <class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void gather_owned(const layout<T>& l, int tid, tile_range r,
                                                      const gather_list<T, MaxRanks>& list, bool src_aligned,
                                                      bool dst_aligned) {
  constexpr int e = layout<T>::vec_elems;
  constexpr int batch = MaxRanks < RCCLX_DETAIL_DDA_PEER_BATCH ? MaxRanks : RCCLX_DETAIL_DDA_PEER_BATCH;
  const int n = list.n;
  for_each_owned<1>(
      l, tid, r,
      [&](const std::size_t(&vi)[1], const bool(&ok)[1]) {
        if (!ok[0]) return;
        const std::size_t off = vi[0] * e;
        RCCLX_DETAIL_DDA_UNROLL
        for (int j0 = 0; j0 < MaxRanks; j0 += batch) {  // unrolled: constant indices, the list in registers
          if (j0 >= n) break;
          gpu::vec16 v[batch] = {};
          for (int j = 0; j < batch; ++j)
            if (j0 + j < n && list.src[j0 + j]) v[j] = load_vec(list.src[j0 + j] + off, src_aligned);
          for (int j = 0; j < batch; ++j)
            if (j0 + j < n && list.src[j0 + j]) store_vec(list.dst[j0 + j] + off, v[j], dst_aligned);
        }
      },
      [&](std::size_t pv) {
        for (int j = 0; j < MaxRanks; ++j) {  // constant indices: the list stays in registers
          if (j >= n) break;
          if (!list.src[j]) continue;
          for (int i = 0; i < l.partial_elems(); ++i) list.dst[j][pv * e + i] = list.src[j][pv * e + i];
        }
      });
}

// Reduces the owned vectors of tiles r across src.p[0..n) (in rank order) into out.
template <class ReduceOp, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void reduce_owned_from(const layout<T>& l, int tid, tile_range r,
                                                           const peer_ptrs<T, MaxRanks>& src, bool src_aligned,
                                                           T* out) {
  constexpr int e = layout<T>::vec_elems;
  const bool out_aligned = gpu::is_aligned(out, 16);
  for_each_owned<1>(
      l, tid, r,
      [&](const std::size_t(&vi)[1], const bool(&ok)[1]) {
        if (!ok[0]) return;
        const std::size_t off = vi[0] * e;
        if (RCCLX_LIKELY(src_aligned)) {
          store_vec(out + off, reduce_vec<ReduceOp>(src, off), out_aligned);
        } else {
          for (int i = 0; i < e; ++i) out[off + i] = reduce_elem<ReduceOp>(src, off + i);
        }
      },
      [&](std::size_t pv) {
        for (int i = 0; i < l.partial_elems(); ++i) out[pv * e + i] = reduce_elem<ReduceOp>(src, pv * e + i);
      });
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
