// rcclx/fp8/block_layout.hpp: where block-scaled FP8 data lives in memory: the FP8 payload
// contiguous (element i at byte i) plus a separate array of one scale per block.
//
//   using L = rcclx::fp8::block_layout<32, rcclx::fp8::scale_kind::fp32>;
//   std::size_t n = ...;                       // elements
//   void* buf = rcclx::gpu::device_malloc(L::total_bytes(n));
//   auto* payload = static_cast<std::uint8_t*>(buf);               // L::payload_bytes(n) = n
//   auto* scales = L::scales(buf, n);          // L::num_blocks(n) scales at L::scales_offset(n)
//
// Block b covers elements [b * BlockSize, min(n, (b + 1) * BlockSize)); its scale is scales[b].
// A slice of whole blocks [b0, b1) is payload[b0*BlockSize ...) + scales[b0 ...): to move a chunk
// between ranks, move both ranges (chunk boundaries on multiples of BlockSize, and of 16 elements
// for 16-byte vector access). The bytes are the same on every backend and rank (little-endian
// float32 scales; an E8M0 scale is one byte, 2^(bits - 127)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../config.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

// How a block's scale is stored.
enum class scale_kind {
  fp32,  // float32 scale = amax / max_finite: the block's largest value maps onto max finite
  e8m0,  // a power of two (OCP MX E8M0, one byte): exact rescaling, up to one bit of range lost
  default_kind = fp32
};

// OCP MX E8M0 scale: 2^(bits - 127), bits in [0, 254]; 0xFF is NaN. rcclx writes bits in [1, 247].
struct e8m0 {
  std::uint8_t bits;

  // Exact (2^-127, bits = 0, is a float32 denormal).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float to_float() const {
    std::uint32_t u = bits == 0 ? 0x00400000u : bits == 0xFF ? 0x7FC00000u : static_cast<std::uint32_t>(bits) << 23;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
  }
  // 2^k for k in [-127, 127].
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE e8m0 from_exponent(int k) {
    e8m0 s;
    s.bits = static_cast<std::uint8_t>(k + 127);
    return s;
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE int exponent() const { return static_cast<int>(bits) - 127; }
};
static_assert(sizeof(e8m0) == 1, "e8m0 is one byte");

template <scale_kind Scale>
using scale_type_t = std::conditional_t<Scale == scale_kind::fp32, float, e8m0>;

template <int BlockSize = 32, scale_kind Scale = scale_kind::fp32>
struct block_layout {
  static_assert(BlockSize >= 1 && (BlockSize & (BlockSize - 1)) == 0, "BlockSize must be a power of two");
  using scale_type = scale_type_t<Scale>;
  static constexpr int block_size = BlockSize;

  RCCLX_HOST_DEVICE static constexpr std::size_t num_blocks(std::size_t n) { return (n + BlockSize - 1) / BlockSize; }
  RCCLX_HOST_DEVICE static constexpr std::size_t payload_bytes(std::size_t n) { return n; }
  RCCLX_HOST_DEVICE static constexpr std::size_t scale_bytes(std::size_t n) { return num_blocks(n) * sizeof(scale_type); }
  // One buffer holding both: payload first, scales from the next 16-byte boundary.
  RCCLX_HOST_DEVICE static constexpr std::size_t scales_offset(std::size_t n) { return (n + 15) / 16 * 16; }
  RCCLX_HOST_DEVICE static constexpr std::size_t total_bytes(std::size_t n) {
    return scales_offset(n) + (scale_bytes(n) + 15) / 16 * 16;
  }
  RCCLX_HOST_DEVICE static scale_type* scales(void* buffer, std::size_t n) {
    return reinterpret_cast<scale_type*>(static_cast<unsigned char*>(buffer) + scales_offset(n));
  }
  RCCLX_HOST_DEVICE static const scale_type* scales(const void* buffer, std::size_t n) {
    return reinterpret_cast<const scale_type*>(static_cast<const unsigned char*>(buffer) + scales_offset(n));
  }
};

}  // namespace fp8
RCCLX_NAMESPACE_END
