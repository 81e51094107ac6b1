// rcclx/fp8/packed.hpp: packed FP8 codecs: 2, 4, 8 or 16 values (up to one 16-byte vector of
// codes) per call, from and to float or bf16, with the hardware conversion where the device pass
// has one and a bit-identical software path everywhere else.
//
//   namespace f8 = rcclx::fp8;
//   float x[16] = ...;                                  // e.g. four 16-byte loads
//   f8::packed<16> q = f8::encode_packed<f8::e4m3>(x);  // saturating, RNE; q.store(dst) = one
//   float y[16];                                        //   16-byte store
//   f8::decode_packed<f8::e4m3>(q, y);
//   auto s = f8::encode_packed<f8::e4m3, f8::overflow::saturate, f8::path::software>(x);  // == q
//
// Byte i of a packed<N> is element i (little-endian words), the same order as N consecutive
// codes in memory. Every result equals the scalar encode/decode of <rcclx/fp8/fp8.hpp> element by
// element (NaN results of decode: some NaN, payload unspecified).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../core/types.hpp"
#include "../gpu/convert.hpp"
#include "../gpu/memory.hpp"
#include "fp8.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

// N FP8 codes in registers: N = 1, 2 or a multiple of 4 (4, 8, 16 = one 16-byte vector; larger
// N for a thread that holds a whole block).
template <int N>
struct alignas(N < 16 ? N : 16) packed {
  static_assert(N == 1 || N == 2 || (N >= 4 && N % 4 == 0),
                "rcclx::fp8::packed<N>: N must be 1, 2 or a multiple of 4");
  static constexpr int size = N;
  using word_type = std::conditional_t<N == 1, std::uint8_t, std::conditional_t<N == 2, std::uint16_t, std::uint32_t>>;
  static constexpr int num_words = N < 4 ? 1 : N / 4;
  word_type w[num_words];

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint8_t operator[](int i) const {
    return static_cast<std::uint8_t>(w[i / 4] >> (8 * (i % 4)));
  }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void set(int i, std::uint8_t code) {
    const int shift = 8 * (i % 4);
    w[i / 4] = static_cast<word_type>((w[i / 4] & ~(word_type(0xFF) << shift)) | (word_type(code) << shift));
  }

  // p must be aligned to min(N, 16) bytes; any address space.
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE packed load(const void* p) {
    packed r;
#if RCCLX_DEVICE_COMPILE
    if constexpr (N >= 16) {
      RCCLX_DETAIL_FP8_UNROLL
      for (int i = 0; i < N / 16; ++i) {
        const gpu::vec16 v = static_cast<const gpu::vec16*>(p)[i];
        for (int j = 0; j < 4; ++j) r.w[4 * i + j] = v.w[j];
      }
    } else if constexpr (N == 8) {
      const std::uint64_t v = *static_cast<const std::uint64_t*>(p);
      r.w[0] = static_cast<std::uint32_t>(v);
      r.w[1] = static_cast<std::uint32_t>(v >> 32);
    } else {
      r.w[0] = *static_cast<const word_type*>(p);
    }
#else
    std::memcpy(r.w, p, N);
#endif
    return r;
  }

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store(void* p) const {
#if RCCLX_DEVICE_COMPILE
    if constexpr (N >= 16) {
      RCCLX_DETAIL_FP8_UNROLL
      for (int i = 0; i < N / 16; ++i) {
        gpu::vec16 v;
        for (int j = 0; j < 4; ++j) v.w[j] = w[4 * i + j];
        static_cast<gpu::vec16*>(p)[i] = v;
      }
    } else if constexpr (N == 8) {
      *static_cast<std::uint64_t*>(p) = static_cast<std::uint64_t>(w[0]) | (static_cast<std::uint64_t>(w[1]) << 32);
    } else {
      *static_cast<word_type*>(p) = w[0];
    }
#else
    std::memcpy(p, w, N);
#endif
  }
};

namespace detail {
template <class Format, overflow Mode, path Path>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t encode_word(float x0, float x1, float x2, float x3) {
  if constexpr (Path == path::automatic && has_hw_encode<Format, Mode>()) {
    return hw_encode4<Format, Mode>(x0, x1, x2, x3);
  } else {
    using sw = sw_codec<Format>;
    return static_cast<std::uint32_t>(sw::template encode<Mode>(x0)) |
           (static_cast<std::uint32_t>(sw::template encode<Mode>(x1)) << 8) |
           (static_cast<std::uint32_t>(sw::template encode<Mode>(x2)) << 16) |
           (static_cast<std::uint32_t>(sw::template encode<Mode>(x3)) << 24);
  }
}

template <class Format, path Path>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void decode_word(std::uint32_t w, float* out) {
  if constexpr (Path == path::automatic && has_hw_decode<Format>()) {
    hw_decode4<Format>(w, out);
  } else {
    for (int i = 0; i < 4; ++i) out[i] = sw_codec<Format>::decode(static_cast<std::uint8_t>(w >> (8 * i)));
  }
}

template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float to_float(T x) {
  if constexpr (std::is_same<T, bf16>::value) {
    return bf16_to_float(x);
  } else {
    static_assert(std::is_same<T, float>::value, "rcclx::fp8: element type must be float or rcclx::bf16");
    return x;
  }
}

template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T from_float(float x) {
  if constexpr (std::is_same<T, bf16>::value) {
    return bf16(x);  // round to nearest even; exact for FP8 values
  } else {
    static_assert(std::is_same<T, float>::value, "rcclx::fp8: element type must be float or rcclx::bf16");
    return x;
  }
}

// N floats -> N/2 words of bf16 pairs (element 2i in the low half of w[i]): round to nearest even,
// NaN -> quiet NaN with its sign, as bf16(float). Where a pass rounds two values per instruction
// (gpu::has_bf16x2_cvt: the same bits for every non-NaN input, subnormals and overflow included),
// a fragment holding a NaN takes the software path for the whole fragment (one test per pair, one
// branch per fragment), since the instruction writes the canonical NaN 0x7FFF.
template <int N>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void floats_to_bf16_pairs(const float (&y)[N], std::uint32_t (&w)[N / 2]) {
  static_assert(N % 2 == 0, "floats_to_bf16_pairs: an even number of values");
  if constexpr (gpu::has_bf16x2_cvt) {
    bool no_nan = true;
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < N; ++i) no_nan &= y[i] == y[i];
    if (no_nan) {
      RCCLX_DETAIL_FP8_UNROLL
      for (int i = 0; i < N / 2; ++i) w[i] = gpu::float2_to_bf16x2(y[2 * i], y[2 * i + 1]);
      return;
    }
  }
  RCCLX_DETAIL_FP8_UNROLL
  for (int i = 0; i < N / 2; ++i)
    w[i] = static_cast<std::uint32_t>(bf16::from_float(y[2 * i])) |
           (static_cast<std::uint32_t>(bf16::from_float(y[2 * i + 1])) << 16);
}

template <class Format, overflow Mode, path Path, int N, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE packed<N> encode_packed_impl(const T (&x)[N]) {
  packed<N> r;
  if constexpr (N == 1) {
    r.w[0] = encode<Format, Mode, Path>(to_float(x[0]));
  } else if constexpr (N == 2) {
    if constexpr (Path == path::automatic && has_hw_encode<Format, Mode>()) {
      r.w[0] = hw_encode2<Format, Mode>(to_float(x[0]), to_float(x[1]));
    } else {
      r.w[0] = static_cast<std::uint16_t>(sw_codec<Format>::template encode<Mode>(to_float(x[0])) |
                                          (sw_codec<Format>::template encode<Mode>(to_float(x[1])) << 8));
    }
  } else {
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < N / 4; ++i) {
      r.w[i] = encode_word<Format, Mode, Path>(to_float(x[4 * i]), to_float(x[4 * i + 1]), to_float(x[4 * i + 2]),
                                               to_float(x[4 * i + 3]));
    }
  }
  return r;
}

template <class Format, path Path, int N, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void decode_packed_impl(const packed<N>& q, T (&out)[N]) {
  RCCLX_DETAIL_FP8_UNROLL
  for (int i = 0; i < packed<N>::num_words; ++i) {
    float f[4];
    decode_word<Format, Path>(q.w[i], f);
    for (int j = 0; j < 4 && 4 * i + j < N; ++j) out[4 * i + j] = from_float<T>(f[j]);
  }
}
}  // namespace detail

template <class Format, overflow Mode = overflow::saturate, path Path = path::automatic, int N>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE packed<N> encode_packed(const float (&x)[N]) {
  return detail::encode_packed_impl<Format, Mode, Path, N>(x);
}

template <class Format, overflow Mode = overflow::saturate, path Path = path::automatic, int N>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE packed<N> encode_packed(const bf16 (&x)[N]) {
  return detail::encode_packed_impl<Format, Mode, Path, N>(x);
}

template <class Format, path Path = path::automatic, int N>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void decode_packed(const packed<N>& q, float (&out)[N]) {
  detail::decode_packed_impl<Format, Path, N>(q, out);
}

// bf16 output: exact for every finite code (NaN -> 0x7FC0).
template <class Format, path Path = path::automatic, int N>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void decode_packed(const packed<N>& q, bf16 (&out)[N]) {
  detail::decode_packed_impl<Format, Path, N>(q, out);
}

// Stochastic rounding, one random word per value (see encode_sr). Software on every backend.
template <class Format, overflow Mode = overflow::saturate, int N, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE packed<N> encode_packed_sr(const T (&x)[N], const std::uint32_t (&random_bits)[N]) {
  packed<N> r;
  for (int i = 0; i < packed<N>::num_words; ++i) r.w[i] = 0;
  RCCLX_DETAIL_FP8_UNROLL
  for (int i = 0; i < N; ++i) {
    r.set(i, detail::sw_codec<Format>::template encode_stochastic<Mode>(detail::to_float(x[i]), random_bits[i]));
  }
  return r;
}

}  // namespace fp8
RCCLX_NAMESPACE_END
