// rcclx/dda/detail/tiles.hpp: how a DDA call splits its elements among the blocks of a rank, and
// the vector loops every phase is made of (copy, reduce from all peers).
//
// Elements are grouped into 16-byte vectors, vectors into tiles of G vectors (G = threads of the
// group: one vector per thread per tile). Tile t belongs to block t % num_blocks, in every phase of
// every call, whatever the element count:
//  - barriers pair block b of every rank, so block b may only read peer data that block b of that
//    peer wrote before the barrier: ownership by tile index gives exactly that;
//  - ownership of a position does not depend on the count, so successive calls with different
//    counts inside one kernel (same group size and block count) never overwrite data a peer's
//    block is still reading: only block b reads what block b writes, and it passed the end barrier.
// Tiles are contiguous G x 16 bytes, so every warp access is fully coalesced (grid-stride loop).
// A count that is not a multiple of the vector width leaves one partial vector, handled element by
// element by the thread that owns its position.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../core/ops.hpp"
#include "../../core/peer_table.hpp"
#include "../../gpu/memory.hpp"

// Peers whose 16-byte loads are issued together before any arithmetic. A macro only so that the
// gfx942 ISA check (tests/compile/isa/dda.cmake) can prove it detects unbatched loads; never change
// it in real code.
#ifndef RCCLX_DETAIL_DDA_PEER_BATCH
#  define RCCLX_DETAIL_DDA_PEER_BATCH 8
#endif

RCCLX_NAMESPACE_BEGIN
namespace dda {
namespace detail {

template <class T>
struct layout {
  static constexpr int vec_elems = gpu::elems_per_vec16<T>;
  std::size_t count;      // elements
  std::size_t full_vecs;  // vectors with vec_elems elements
  std::size_t tiles;      // tiles (the last one may be short)
  int tile_vecs;          // G: vectors per tile = threads of the group
  int block;
  int num_blocks;

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE layout(std::size_t n, int group_size, int b, int nb)
      : count(n), full_vecs(n / vec_elems), tile_vecs(group_size), block(b), num_blocks(nb) {
    const std::size_t vecs = (n + vec_elems - 1) / vec_elems;
    tiles = (vecs + group_size - 1) / group_size;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool has_partial() const { return full_vecs * vec_elems != count; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int partial_elems() const {
    return static_cast<int>(count - full_vecs * vec_elems);
  }
  // First tile >= begin owned by this block.
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::size_t first_owned(std::size_t begin) const {
    const std::size_t nb = static_cast<std::size_t>(num_blocks);
    return begin + (static_cast<std::size_t>(block) + nb - begin % nb) % nb;
  }
};

// Tiles [begin, end) of chunk c when the tiles are split into `parts` equal chunks (tree).
struct tile_range {
  std::size_t begin, end;
};
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE tile_range chunk_tiles(std::size_t tiles, int parts, int c) {
  const std::size_t per = (tiles + static_cast<std::size_t>(parts) - 1) / static_cast<std::size_t>(parts);
  std::size_t b = per * static_cast<std::size_t>(c), e = b + per;
  if (b > tiles) b = tiles;
  if (e > tiles) e = tiles;
  return {b, e};
}

// Calls full(vi, ok) for the full vectors this thread owns in tiles [r.begin, r.end), Unroll of them
// per call (vi[j] valid where ok[j]), so the body can issue all its loads before its stores; then
// partial(v) once if this thread owns the partial vector v inside the range.
template <int Unroll, class T, class Full, class Partial>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void for_each_owned(const layout<T>& l, int tid, tile_range r, Full&& full,
                                                        Partial&& partial) {
  const std::size_t stride = static_cast<std::size_t>(l.num_blocks);
  const std::size_t g = static_cast<std::size_t>(l.tile_vecs);
  // Unroll is the only unrolling: a compiler that also unrolled this loop would double the
  // registers (all blocks of all emulated ranks must fit on one GPU at once) for no more bytes in
  // flight than Unroll and the peer batch already give.
#if RCCLX_DEVICE_COMPILE
#  pragma unroll 1
#endif
  for (std::size_t t = l.first_owned(r.begin); t < r.end; t += stride * Unroll) {
    std::size_t vi[Unroll];
    bool ok[Unroll];
    for (int j = 0; j < Unroll; ++j) {
      const std::size_t tj = t + static_cast<std::size_t>(j) * stride;
      vi[j] = tj * g + static_cast<std::size_t>(tid);
      ok[j] = tj < r.end && vi[j] < l.full_vecs;
    }
    full(vi, ok);
  }
  if (l.has_partial()) {
    const std::size_t pv = l.full_vecs, pt = pv / g;
    if (pt >= r.begin && pt < r.end && pt % stride == static_cast<std::size_t>(l.block) &&
        pv % g == static_cast<std::size_t>(tid))
      partial(pv);
  }
}

// ---- vector access with an alignment fallback ------------------------------------------------------
// Symmetric buffers are allocation bases (16-byte aligned, checked by the host launchers); a user's
// input or output may be aligned only to sizeof(T), then it is accessed element by element.

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

// ---- the phases' building blocks ------------------------------------------------------------------

// Copies the owned vectors of tiles r from src to dst (4 vectors in flight per thread).
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void copy_owned(const layout<T>& l, int tid, tile_range r, const T* src,
                                                    T* dst) {
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

// Reduces one 16-byte vector at element offset `off` across ranks 0..n-1. Loads are issued in
// batches of up to 8 peers before any arithmetic (8 x 16 bytes in flight per thread), and applied
// strictly in rank order, so the result does not depend on which load returned first. Loads: the
// cache policy of the peers' loads.
template <class ReduceOp, gpu::cache_hint Loads = gpu::cache_hint::normal, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE gpu::vec16 reduce_vec(const peer_ptrs<T, MaxRanks>& src, std::size_t off) {
  using traits = core::value_traits<T>;
  using acc_t = typename traits::acc_type;
  constexpr int e = layout<T>::vec_elems;
  constexpr int batch = MaxRanks < RCCLX_DETAIL_DDA_PEER_BATCH ? MaxRanks : RCCLX_DETAIL_DDA_PEER_BATCH;
  const ReduceOp op{};
  const int n = src.n;
  acc_t acc[e];
  {
    gpu::vec16 v[batch] = {};
    for (int j = 0; j < batch; ++j)
      if (j < n) v[j] = gpu::load16<Loads>(src.p[j] + off);
    traits::unpack(v[0], acc);
    for (int j = 1; j < batch; ++j) {
      if (j < n) {
        acc_t x[e];
        traits::unpack(v[j], x);
        for (int i = 0; i < e; ++i) acc[i] = op(acc[i], x[i]);
      }
    }
  }
  // More than 8 ranks: further batches (a compile-time trip count, so indices stay constant).
  for (int p0 = batch; p0 < MaxRanks; p0 += batch) {
    if (p0 >= n) break;
    gpu::vec16 v[batch] = {};
    for (int j = 0; j < batch; ++j)
      if (p0 + j < n) v[j] = gpu::load16<Loads>(src.p[p0 + j] + off);
    for (int j = 0; j < batch; ++j) {
      if (p0 + j < n) {
        acc_t x[e];
        traits::unpack(v[j], x);
        for (int i = 0; i < e; ++i) acc[i] = op(acc[i], x[i]);
      }
    }
  }
  return traits::pack(acc);
}

// The same for one element (the partial vector).
template <class ReduceOp, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T reduce_elem(const peer_ptrs<T, MaxRanks>& src, std::size_t i) {
  using traits = core::value_traits<T>;
  const ReduceOp op{};
  typename traits::acc_type acc = traits::load(src.p[0][i]);
  for (int p = 1; p < MaxRanks; ++p)
    if (p < src.n) acc = op(acc, traits::load(src.p[p][i]));
  return traits::store(acc);
}

// Reduces the owned vectors of tiles r from every rank's buffer into out, and into out2 too when
// out2 is not null (tree: the rank's own symmetric buffer).
template <class ReduceOp, class T, int MaxRanks>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void reduce_owned(const layout<T>& l, int tid, tile_range r,
                                                      const core::peer_table<T, MaxRanks>& t, T* out, T* out2) {
  constexpr int e = layout<T>::vec_elems;
  const peer_ptrs<T, MaxRanks> src(t);
  const bool out_aligned = gpu::is_aligned(out, 16);
  for_each_owned<1>(
      l, tid, r,
      [&](const std::size_t(&vi)[1], const bool(&ok)[1]) {
        if (!ok[0]) return;
        const std::size_t off = vi[0] * e;
        const gpu::vec16 v = reduce_vec<ReduceOp>(src, off);
        store_vec(out + off, v, out_aligned);
        if (out2) gpu::store16(out2 + off, v);
      },
      [&](std::size_t pv) {
        for (int i = 0; i < l.partial_elems(); ++i) {
          const T x = reduce_elem<ReduceOp>(src, pv * e + i);
          out[pv * e + i] = x;
          if (out2) out2[pv * e + i] = x;
        }
      });
}

}  // namespace detail
}  // namespace dda
RCCLX_NAMESPACE_END
