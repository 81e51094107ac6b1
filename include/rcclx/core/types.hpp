// rcclx/core/types.hpp: portable bf16 and fp16 storage types, usable on host and device, with
// round-to-nearest-even conversions that give the same bits on every backend.
//
//   rcclx::bf16 h(1.5f);            // explicit from float (RNE; NaN stays NaN)
//   float f = static_cast<float>(h);
//   std::uint16_t raw = h.bits;     // trivially copyable, 2 bytes, the IEEE/bfloat16 layout
#pragma once

#include <cstdint>
#include <cstring>

#include "../config.hpp"

RCCLX_NAMESPACE_BEGIN

namespace detail {
// __builtin_memcpy, not std::memcpy: with HIP, std::memcpy is host-only when <cstring> was included
// before hip_runtime.h, and these functions are called from kernels.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t float_bits(float f) {
  std::uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float bits_float(std::uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

// bfloat16: 1 sign, 8 exponent, 7 mantissa bits (the top half of an IEEE float).
struct bf16 {
  std::uint16_t bits;

  bf16() = default;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE explicit bf16(float f) : bits(from_float(f)) {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE explicit operator float() const {
    return detail::bits_float(static_cast<std::uint32_t>(bits) << 16);
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE bf16 from_bits(std::uint16_t b) {
    bf16 h;
    h.bits = b;
    return h;
  }
  // Round to nearest even; NaN becomes a quiet NaN with the same sign (0x7FC0 / 0xFFC0).
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint16_t from_float(float f) {
    const std::uint32_t u = detail::float_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>((u >> 16) | 0x7FC0u);
    const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>((u + rounding) >> 16);
  }
};

// IEEE binary16: 1 sign, 5 exponent, 10 mantissa bits.
struct fp16 {
  std::uint16_t bits;

  fp16() = default;
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE explicit fp16(float f) : bits(from_float(f)) {}
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE explicit operator float() const { return to_float(bits); }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE fp16 from_bits(std::uint16_t b) {
    fp16 h;
    h.bits = b;
    return h;
  }

  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float to_float(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1Fu;
    const std::uint32_t man = h & 0x3FFu;
    if (exp == 0x1F) return detail::bits_float(sign | 0x7F800000u | (man << 13));  // Inf / NaN
    if (exp != 0) return detail::bits_float(sign | ((exp + 112u) << 23) | (man << 13));
    // Subnormal: man * 2^-24, exact in float.
    const float mag = static_cast<float>(man) * 5.9604644775390625e-8f;
    return sign ? -mag : mag;
  }

  // Round to nearest even, overflow to Inf, subnormals exact; NaN becomes a quiet NaN.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint16_t from_float(float f) {
    const std::uint32_t u = detail::float_bits(f);
    const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
    const std::uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // rounds to >= 65520
    if (a < 0x38800000u) {
      // Result is subnormal (or zero): value / 2^-24 rounded to nearest even integer.
      if (a < 0x33000000u) return sign;  // < 2^-25: rounds to zero (2^-25 itself ties to even 0)
      const std::uint32_t e = a >> 23;          // 102..112
      const std::uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
      const std::uint32_t shift = 126u - e;     // 14..24
      std::uint32_t q = m >> shift;
      const std::uint32_t rem = m & ((1u << shift) - 1u);
      const std::uint32_t half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (q & 1u))) ++q;
      return static_cast<std::uint16_t>(sign | q);
    }
    // Normal: rebias and round the 13 dropped bits to nearest even.
    const std::uint32_t r = a - 0x38000000u;  // exponent 127 -> 15
    const std::uint32_t rounded = r + 0xFFFu + ((r >> 13) & 1u);
    return static_cast<std::uint16_t>(sign | (rounded >> 13));
  }
};

static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2, "16-bit storage types");

RCCLX_NAMESPACE_END
