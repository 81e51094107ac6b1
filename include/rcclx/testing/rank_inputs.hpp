// rcclx/testing/rank_inputs.hpp: deterministic inputs for a collective's ranks, the same on the host
// (where a reference reads them) and on the device (where a fill kernel writes them): element i of
// rank r is uniform in [-1, 1) with 24 random bits (splitmix64), so that each element type rounds
// it alike on both sides; emulated_fill writes them, or a poison pattern, into every emulated
// rank's buffer with one launch; copy_rank_inputs puts a process's own in device memory.
//
//   namespace rt = rcclx::testing;
//   rt::emulated_fill<rcclx::bf16, 8> f{{in0, in1, in2, in3}, count, false};   // poison = true: bytes 0x5A
//   rt::launch_emulated(4, blocks, threads, f, stream);
//   const float x = static_cast<float>(rt::rank_input<rcclx::bf16>(rank, i));   // what in<rank>[i] holds
//   rt::copy_rank_inputs(x_dev, count, my_rank);                                 // a process per rank
#pragma once

#include <cstddef>
#include <cstdint>

#include <vector>

#include "../config.hpp"
#include "../gpu/runtime.hpp"
#include "error_bounds.hpp"
#include "launch.hpp"

RCCLX_NAMESPACE_BEGIN
namespace testing {

// splitmix64's output for state x: x advanced by 2^64 / golden ratio, then its finaliser.
RCCLX_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1), 53 bits.
inline double unit_uniform(std::uint64_t seed) { return static_cast<double>(splitmix64(seed) >> 11) * 0x1p-53; }

// Input element i of rank r, rounded to T: uniform in [-1, 1), a multiple of 2^-23.
template <class T = float>
RCCLX_HOST_DEVICE inline T rank_input(int rank, std::size_t i) {
  const std::uint64_t h = splitmix64(static_cast<std::uint64_t>(i) * 64 + static_cast<std::uint64_t>(rank));
  return T(static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f);
}

// Every rank's count elements of dst[rank]: rank_input<T>, or (poison) bytes 0x5A. An element loop
// over (rank, block, thread) for launch_emulated; T of at most 4 bytes.
template <class T, int MaxRanks>
struct emulated_fill {
  T* dst[MaxRanks];
  std::size_t count;
  bool poison;

  static_assert(sizeof(T) <= 4, "emulated_fill: elements of at most 4 bytes");

  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, launch_index ix) const {
    T p;
    const std::uint32_t pattern = 0x5A5A5A5Au;
    __builtin_memcpy(&p, &pattern, sizeof(T));
    const std::size_t stride = static_cast<std::size_t>(ix.num_blocks) * static_cast<std::size_t>(g.size());
    for (std::size_t i = static_cast<std::size_t>(ix.block) * g.size() + g.thread_rank(); i < count; i += stride)
      dst[ix.rank][i] = poison ? p : rank_input<T>(ix.rank, i);
  }
};

// rank_input<T>(rank, i) for i < count, computed on the host's threads (parallel_indices), copied
// to dst (device memory).
template <class T>
void copy_rank_inputs(T* dst, std::size_t count, int rank) {
  std::vector<T> h(count);
  parallel_indices(count, [&](unsigned, std::size_t i) { h[i] = rank_input<T>(rank, i); });
  gpu::copy(dst, h.data(), count * sizeof(T));
}

}  // namespace testing
RCCLX_NAMESPACE_END
