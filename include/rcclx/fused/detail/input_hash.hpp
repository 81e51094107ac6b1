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

// A 32-bit finalizer (every input bit reaches every output bit).
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// The hash of vector `v` at index `i` of a tile: its words chained in order from a seed of the
// index, so that a vector moved to another index (or words swapped inside it) hashes differently.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t vec_hash(const gpu::vec16& v, std::size_t i) {
  std::uint32_t h = mix32(static_cast<std::uint32_t>(i) * 0x9E3779B9u + 0x632BE5ABu);
  for (int k = 0; k < 4; ++k) h = mix32(h + v.w[k]);
  return h;
}

// Group-collective: xors into *acc (a word of this rank) the hash of the `vecs` 16-byte vectors at
// `tile`: the xor of vec_hash over them with bit 0 cleared, and 1 (bit 0 counts the passes). Each
// thread hashes vectors thread_rank, thread_rank + size, ...; a group of whole warps xor-reduces
// them with shuffles and stores one atomic xor per warp, any other group one per thread.
template <class Group>
RCCLX_HOST_DEVICE void xor_input_hash(const Group& g, const void* tile, std::size_t vecs, std::uint32_t* acc) {
  const auto* v = static_cast<const gpu::vec16*>(tile);
  std::uint32_t h = 0;
  for (std::size_t i = static_cast<std::size_t>(g.thread_rank()); i < vecs; i += static_cast<std::size_t>(g.size()))
    h ^= vec_hash(gpu::load16(v + i), i);
  h = (h & ~1u) | (g.thread_rank() == 0 ? 1u : 0u);
  if (g.size() % RCCLX_WARP_SIZE == 0) {
    for (int m = RCCLX_WARP_SIZE / 2; m > 0; m /= 2) h ^= gpu::shuffle_xor(h, m);
    if (g.thread_rank() % RCCLX_WARP_SIZE != 0) return;
  }
  if (h != 0u) (void)gpu::fetch_xor_local(acc, h);
}

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
