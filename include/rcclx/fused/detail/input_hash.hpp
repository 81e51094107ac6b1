// rcclx/fused/detail/input_hash.hpp: the checked mode's (RCCLX_CHECKS) hash of a tile's input, taken
// when the tile is published and again at the end of its reduce (core/tile_audit.hpp, the input
// hash word): the two passes cancel unless the input changed while the peers could read it
// (misuse::input_changed).
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../gpu/atomic.hpp"
#include "../../gpu/memory.hpp"
#include "../../gpu/warp.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {
namespace detail {

// The hash of vector `v` at index `i` of a tile: each word times its own odd constant (a bijection:
// a change of one word always changes its product) and the index times another, summed in two
// halves and xored, so that a changed word, a vector moved to another index and words swapped
// inside it hash differently; five independent multiplies, no dependent chain (the check lanes
// hash while the flag threads wait, and a wait's vote waits for them).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t vec_hash(const gpu::vec16& v, std::size_t i) {
  return (v.w[0] * 0x9E3779B1u + v.w[1] * 0x85EBCA77u) ^
         (v.w[2] * 0xC2B2AE3Du + v.w[3] * 0x27D4EB2Fu + static_cast<std::uint32_t>(i) * 0x165667B1u);
}

// The threads of a group that hash: thread ranks [first, end) (first and end: 0 and g.size(), or
// multiples of the warp size: whole warps), lane = thread_rank - first of lanes = end - first.
struct hash_lanes {
  int first, end, lane, lanes;
  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE hash_lanes(const Group& g, int f, int e)
      : first(f), end(e), lane(g.thread_rank() - f), lanes(e - f) {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool in() const { return lane >= 0 && lane < lanes; }
};

// Called by the hash lanes of a group only: xors into *acc (a word of this rank) a tile's hash from
// every lane's part `h` (the xor of vec_hash over the vectors it loaded): the xor over the lanes with
// bit 0 cleared, and 1 (bit 0 counts the passes). Whole warps xor-reduce the parts with shuffles
// and store one atomic xor per warp, other lanes one per thread.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void xor_hash_parts(const hash_lanes& l, std::uint32_t h, std::uint32_t* acc) {
  h = (h & ~1u) | (l.lane == 0 ? 1u : 0u);
  if (l.end % RCCLX_WARP_SIZE == 0 && l.first % RCCLX_WARP_SIZE == 0) {
    for (int m = RCCLX_WARP_SIZE / 2; m > 0; m /= 2) h ^= gpu::shuffle_xor(h, m);
    if (l.lane % RCCLX_WARP_SIZE != 0) return;
  }
  if (h != 0u) (void)gpu::fetch_xor_local(acc, h);
}

// Called by the hash lanes only: xors into *acc the hash of the `vecs` 16-byte vectors at `tile`
// (xor_hash_parts; lane i hashes vectors i, i + lanes, ...).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void xor_input_hash(const hash_lanes& l, const void* tile, std::size_t vecs, std::uint32_t* acc) {
  const auto* v = static_cast<const gpu::vec16*>(tile);
  std::uint32_t h = 0;
  for (std::size_t i = static_cast<std::size_t>(l.lane); i < vecs; i += static_cast<std::size_t>(l.lanes))
    h ^= vec_hash(gpu::load16(v + i), i);
  xor_hash_parts(l, h, acc);
}

// xor_input_hash in two steps, for a tile of at most Held vectors per lane: load() issues the
// loads and keeps the vectors, hash_out() hashes them later (beside a wait the call makes anyway),
// so that their round trip is not one of their own. Hash lanes only.
template <int Held>
struct held_input_hash {
  gpu::vec16 v[Held];
  std::uint32_t* acc = nullptr;  // null: nothing held
  std::size_t vecs = 0;
  RCCLX_HOST_DEVICE static constexpr bool fits(const hash_lanes& l, std::size_t vecs) {
    return vecs <= static_cast<std::size_t>(Held) * static_cast<std::size_t>(l.lanes);
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load(const hash_lanes& l, const void* tile, std::size_t n, std::uint32_t* word) {
    const auto* p = static_cast<const gpu::vec16*>(tile);
    const std::size_t tid = static_cast<std::size_t>(l.lane), gs = static_cast<std::size_t>(l.lanes);
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int k = 0; k < Held; ++k)
      if (tid + static_cast<std::size_t>(k) * gs < n) v[k] = gpu::load16(p + tid + static_cast<std::size_t>(k) * gs);
    acc = word;
    vecs = n;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void hash_out(const hash_lanes& l) {
    if (acc == nullptr) return;
    const std::size_t tid = static_cast<std::size_t>(l.lane), gs = static_cast<std::size_t>(l.lanes);
    std::uint32_t h = 0;
#if RCCLX_DEVICE_COMPILE
#  pragma unroll
#endif
    for (int k = 0; k < Held; ++k) {
      const std::size_t i = tid + static_cast<std::size_t>(k) * gs;
      if (i < vecs) h ^= vec_hash(v[k], i);
    }
    xor_hash_parts(l, h, acc);
    acc = nullptr;
  }
};

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
