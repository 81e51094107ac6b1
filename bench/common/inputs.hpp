// bench/common/inputs.hpp: the tools' deterministic inputs, the same on the host (references) and
// on the device (fill kernels).
#pragma once

#include <rcclx/config.hpp>

#include <cstddef>
#include <cstdint>

namespace bench {

// splitmix64's finaliser of x + its increment (2^64 / golden ratio): a well-mixed 64-bit value.
inline constexpr std::uint64_t splitmix64_increment = 0x9E3779B97F4A7C15ull;
RCCLX_HOST_DEVICE inline std::uint64_t mix(std::uint64_t x) {
  x += splitmix64_increment;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Uniform in [0, 1), 53 bits.
inline double unit(std::uint64_t seed) { return static_cast<double>(mix(seed) >> 11) * 0x1p-53; }

// Input element i of rank r: uniform in [-1, 1).
RCCLX_HOST_DEVICE inline float input_value(int rank, std::size_t i) {
  const std::uint64_t h = mix(static_cast<std::uint64_t>(i) * 64 + static_cast<std::uint64_t>(rank));
  return static_cast<float>(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

}  // namespace bench
