// The checked mode's input hash (fused/detail/input_hash.hpp): the check lanes hash a published tile
// at its publish and again at the end of its reduce, and the two passes must differ when the tile
// changed in between (misuse::input_changed). Checked against the tile itself, not another hash:
// every single-bit change of every word of a tile, every swap of two different vectors and every
// swap of two different words inside a vector changes the tile's hash (bit 0 aside: the lanes' xor
// keeps it to count the passes).
#include <rcclx/fused/detail/input_hash.hpp>

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "../support/catch.hpp"

namespace {

using rcclx::gpu::vec16;
constexpr std::size_t tile_vecs = 128;  // a 2 KiB tile

// The tile's hash as the lanes leave it in the audit word: the xor of every vector's hash, bit 0 cleared.
std::uint32_t tile_hash(const std::vector<vec16>& t) {
  std::uint32_t h = 0;
  for (std::size_t i = 0; i < t.size(); ++i) h ^= rcclx::fused::detail::vec_hash(t[i], i);
  return h & ~1u;
}

// Seed 0: a tile of zeros (an input the kernel has not written yet); otherwise random words.
std::vector<vec16> make_tile(std::uint32_t seed) {
  std::vector<vec16> t(tile_vecs);
  std::mt19937 rng(seed);
  for (vec16& v : t)
    for (std::uint32_t& w : v.w) w = seed == 0 ? 0u : static_cast<std::uint32_t>(rng());
  return t;
}

}  // namespace

TEST_CASE("input hash: every single-bit change of a tile changes its hash") {
  for (std::uint32_t seed : {0u, 1u, 2u}) {
    std::vector<vec16> t = make_tile(seed);
    const std::uint32_t before = tile_hash(t);
    int unchanged = 0;
    for (std::size_t i = 0; i < tile_vecs; ++i)
      for (int k = 0; k < 4; ++k)
        for (int b = 0; b < 32; ++b) {
          t[i].w[k] ^= 1u << b;
          unchanged += tile_hash(t) == before ? 1 : 0;
          t[i].w[k] ^= 1u << b;
        }
    INFO("seed " << seed);
    CHECK(unchanged == 0);
  }
}

TEST_CASE("input hash: a vector moved to another index or words swapped inside one change the hash") {
  std::vector<vec16> t = make_tile(3);
  const std::uint32_t before = tile_hash(t);
  int unchanged = 0, tried = 0;
  for (std::size_t i = 0; i < tile_vecs; ++i)
    for (std::size_t j = i + 1; j < tile_vecs; ++j) {
      std::swap(t[i], t[j]);
      unchanged += tile_hash(t) == before ? 1 : 0;
      ++tried;
      std::swap(t[i], t[j]);
    }
  for (std::size_t i = 0; i < tile_vecs; ++i)
    for (int k = 0; k < 4; ++k)
      for (int l = k + 1; l < 4; ++l) {
        std::swap(t[i].w[k], t[i].w[l]);
        unchanged += tile_hash(t) == before ? 1 : 0;
        ++tried;
        std::swap(t[i].w[k], t[i].w[l]);
      }
  INFO(tried << " swaps tried");
  CHECK(unchanged == 0);
}
