// tests/support/bits.hpp: the tests' deterministic hashing and float bit views (host and device).
#pragma once

#include <rcclx/config.hpp>
#include <rcclx/testing/rank_inputs.hpp>

#include <cstdint>
#include <cstring>

namespace rcclx_test {

// splitmix64: a well-mixed 64-bit value of x (the tests' inputs and seeds).
RCCLX_HOST_DEVICE inline std::uint64_t mix(std::uint64_t x) { return rcclx::testing::splitmix64(x); }

inline float float_of_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

}  // namespace rcclx_test
