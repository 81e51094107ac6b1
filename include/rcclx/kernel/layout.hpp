// rcclx/kernel/layout.hpp: how a collective splits its elements among the blocks of a rank, and
// how many blocks a call of a given size launches. Part of rcclx/kernel/: internal but shared by
// the collectives (dda, lpc, fused); readable, not a public API.
//
//   const rcclx::kernel::layout<float> l(count, g.size(), block, num_blocks);
//   rcclx::kernel::for_each_owned<4>(l, g.thread_rank(), {0, l.tiles},
//       [&](const std::size_t (&vi)[4], const bool (&ok)[4]) { ... },   // 4 full vectors per step
//       [&](std::size_t pv) { ... });                                    // the partial vector, once
//   int nb = rcclx::kernel::blocks_for_elems<float>(count, threads, cap);  // the same on every rank
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

#include "../config.hpp"
#include "../gpu/memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace kernel {

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

// Tiles [begin, end) of a phase.
struct tile_range {
  std::size_t begin, end;
};

// Tiles of chunk c when the tiles are split into `parts` equal chunks (a two-shot's rank chunks).
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

// Blocks per rank of a one-phase collective whose tiles cover `elems` elements (a chunk): one tile
// (threads x 16 bytes) per block, up to `cap`, then as few blocks as give every block the same
// number of tiles (a pure function of its arguments: every rank launches the same grid).
RCCLX_HOST_DEVICE constexpr int balanced_blocks(std::size_t tiles, int cap) {
  if (tiles <= 1 || cap <= 1) return 1;
  const std::size_t c = static_cast<std::size_t>(cap);
  const std::size_t per_block = (tiles + c - 1) / c;
  return static_cast<int>((tiles + per_block - 1) / per_block);
}
template <class T>
RCCLX_HOST_DEVICE constexpr int blocks_for_elems(std::size_t elems, int threads, int cap) {
  const std::size_t e = static_cast<std::size_t>(gpu::elems_per_vec16<T>);
  const std::size_t vecs = (elems + e - 1) / e;
  return balanced_blocks((vecs + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads), cap);
}

}  // namespace kernel
RCCLX_NAMESPACE_END
