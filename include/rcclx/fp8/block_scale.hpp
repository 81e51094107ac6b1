// rcclx/fp8/block_scale.hpp: block-scaled FP8 quantization for use inside your own kernels: one
// scale per block of BlockSize (default 32) consecutive elements, float32 or power-of-two (E8M0).
//
//   namespace f8 = rcclx::fp8;
//   using quant = f8::block_quantize<f8::e4m3>;      // 32-element blocks, float32 scales
//   using dequant = f8::block_dequantize<f8::e4m3>;
//   // Each thread holds 8 consecutive floats; 4 neighbouring lanes (aligned) share a block:
//   float x[8] = ...;
//   f8::packed<8> q;
//   float s = quant{}(x, q);                          // amax over the 4 lanes by shuffles
//   q.store(payload + i);  if (lane % 4 == 0) scales[i / 32] = s;
//   ...
//   float y[8];
//   dequant{}(f8::packed<8>::load(payload + i), scales[i / 32], y);
//
// Scale rules (amax = largest finite |x| of the block; Inf and NaN elements are ignored for it):
//   fp32: scale = amax / max_finite (quantize multiplies by max_finite / amax): amax maps onto
//         max finite. Blocks with amax < max_finite * 2^-126 (all-zero blocks too) use scale 2^-126,
//         so no scale is a float denormal and no multiplier overflows.
//   e8m0: scale = 2^k with the smallest k such that amax / 2^k <= max_finite (never overflows;
//         k >= -126). Quantizing and dequantizing are exact power-of-two rescalings.
// Encoding saturates: finite inputs give finite codes and finite dequantized floats (also near
// FLT_MAX); NaN elements stay NaN; +-Inf elements become +-max_finite * scale. Error bounds per
// format and scale kind: docs/numerics.md.
//
// Lanes that share a block must be BlockSize / N consecutive lanes of one warp starting at a
// multiple of that count, and every lane of the warp must make the call (converged): the block's
// amax is combined with warp shuffles (NVIDIA) or ds_swizzle (AMD). A thread that owns a whole
// block (N == BlockSize) needs no other lane; on the host backend that is the only allowed shape.
#pragma once

#include <cstdint>
#include <type_traits>

#include "../core/types.hpp"
#include "../gpu/warp.hpp"
#include "block_layout.hpp"
#include "packed.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

namespace detail {

// Max of v over `Lanes` consecutive aligned lanes (butterfly: every lane gets the result). The
// masks are known at compile time: a ds_swizzle per step on AMD, not a ds_bpermute.
template <int Lanes>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t lane_group_max(std::uint32_t v) {
  static_assert(Lanes >= 1 && Lanes <= 32 && (Lanes & (Lanes - 1)) == 0,
                "rcclx::fp8: the lanes sharing a block must be a power of two, at most 32");
#if RCCLX_BACKEND_HOST && !RCCLX_EMULATE_THREADS  // one-thread blocks
  static_assert(Lanes == 1, "rcclx::fp8: on the host backend a thread must own its whole block (N == BlockSize)");
#endif
  if constexpr (Lanes > 1) {
    const std::uint32_t o = gpu::shuffle_xor<Lanes / 2>(v);
    return lane_group_max<Lanes / 2>(o > v ? o : v);
  } else {
    return v;
  }
}

// |x| as float32 bits for finite x, 0 for Inf/NaN. Non-negative floats order like their bits.
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t finite_abs_bits(float x) {
  const std::uint32_t a = float_bits(x) & 0x7FFFFFFFu;
  return a < 0x7F800000u ? a : 0u;
}
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE std::uint32_t finite_abs_bits(bf16 x) {
  const std::uint32_t a = x.bits & 0x7FFFu;
  return a < 0x7F80u ? a << 16 : 0u;
}

}  // namespace detail

// The scale of one block, from its amax.
template <class Format, scale_kind Scale = scale_kind::fp32>
struct block_scale {
  using traits = format_traits<Format>;
  using scale_type = scale_type_t<Scale>;

  scale_type stored;       // written to the scale array
  float quant_multiplier;  // codes = encode(x * quant_multiplier)
  float quant_limit;       // |x * quant_multiplier| is clamped to this (max_finite, except E8M0
                           // scales of blocks within a factor 2 of FLT_MAX: see from_amax)

  // amax: the largest finite |x| of the block (Inf is treated as FLT_MAX, NaN as 0).
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE block_scale from_amax(float amax) {
    constexpr float max = traits::max_finite;
    constexpr float smallest_amax = max * 0x1p-126f;  // below it the scale would be a denormal
    amax = amax <= 0x1.fffffep127f ? amax : (amax == amax ? 0x1.fffffep127f : 0.0f);
    block_scale s;
    s.quant_limit = max;
    if constexpr (Scale == scale_kind::fp32) {
      if (amax < smallest_amax) {
        s.stored = 0x1p-126f;
        s.quant_multiplier = 0x1p126f;
      } else {
        s.stored = amax / max;
        // max * stored must stay finite. Never triggered by the four formats' max values (checked
        // over every amax that could), kept so that the guarantee does not rest on that search.
        if (s.stored * max > 0x1.fffffep127f) s.stored = detail::bits_float(detail::float_bits(s.stored) - 1u);
        s.quant_multiplier = max / amax;
      }
    } else {
      int k = -126;
      if (amax >= smallest_amax) {
        const std::uint32_t a = detail::float_bits(amax), m = detail::float_bits(max);
        k = static_cast<int>(a >> 23) - static_cast<int>(m >> 23) + ((a & 0x7FFFFFu) > (m & 0x7FFFFFu) ? 1 : 0);
      }
      s.stored = e8m0::from_exponent(k);
      s.quant_multiplier = detail::bits_float(static_cast<std::uint32_t>(127 - k) << 23);
      // Codes near max times 2^k would pass FLT_MAX when k > 127 - max_exponent: the largest
      // value allowed is then the top of the binade below 2^(128 - k), (2 - 2^-M) * 2^(127 - k).
      if (k > 127 - traits::max_exponent) {
        s.quant_limit = detail::bits_float((static_cast<std::uint32_t>(254 - k) << 23) |
                                           (((1u << traits::mantissa_bits) - 1u) << (23 - traits::mantissa_bits)));
      }
    }
    return s;
  }

  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float dequant_multiplier(scale_type s) {
    if constexpr (Scale == scale_kind::fp32) {
      return s;
    } else {
      return s.to_float();
    }
  }
};

// Quantizes one block (or the fragment of it that this thread holds): computes the scale, writes
// the codes, returns the scale to store. Stateless; pass by value into kernels.
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic>
struct block_quantize {
  static_assert(BlockSize >= 1 && (BlockSize & (BlockSize - 1)) == 0, "BlockSize must be a power of two");
  using format = Format;
  using scale_type = scale_type_t<Scale>;
  using scale_params = block_scale<Format, Scale>;
  static constexpr int block_size = BlockSize;
  static constexpr scale_kind scale = Scale;

  // Fragment form: x is N consecutive elements of one block (N divides BlockSize); the block's
  // BlockSize / N fragments are held by that many consecutive, aligned lanes, which call together.
  // Elements past the end of the data must be passed as 0.
  template <int N, class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE scale_type operator()(const T (&x)[N], packed<N>& q) const {
    static_assert(BlockSize % N == 0, "a fragment must be a whole fraction of the block (BlockSize % N == 0)");
    const scale_params s = scale_params::from_amax(
        detail::bits_float(detail::lane_group_max<BlockSize / N>(amax_bits(x))));
    q = apply(x, s);
    return s.stored;
  }

  // Memory form, one thread per block: quantizes in[0, count) (count <= BlockSize) into
  // out[0, count) and returns the block's scale.
  template <class T>
  RCCLX_HOST_DEVICE scale_type operator()(const T* in, std::uint8_t* out, int count = BlockSize) const {
    std::uint32_t a = 0;
    for (int i = 0; i < count; ++i) {
      const std::uint32_t b = detail::finite_abs_bits(in[i]);
      a = b > a ? b : a;
    }
    const scale_params s = scale_params::from_amax(detail::bits_float(a));
    for (int i = 0; i < count; ++i) out[i] = encode_one(detail::to_float(in[i]), s);
    return s.stored;
  }

  // Building blocks, for kernels that find the amax their own way.
  // The largest finite |x| as float32 bits (Inf and NaN elements ignored). No lane cooperation.
  template <int N, class T>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint32_t amax_bits(const T (&x)[N]) {
#if RCCLX_DEVICE_COMPILE
    // One float max per element (FMNMX |x| / v_max_f32 |x|): fmaxf ignores a NaN operand, and
    // non-negative floats order like their bits, so without Inf this is the integer scan's result.
    // A fragment holding an Inf (the max is then +Inf) re-scans with the filter; that branch is
    // per lane and holds no shuffle, so lanes may diverge there.
    float m = 0.0f;
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < N; ++i) m = ::fmaxf(m, ::fabsf(detail::to_float(x[i])));
    std::uint32_t a = detail::float_bits(m);
    if (a == 0x7F800000u) a = finite_amax_scan(x);
    return a;
#else
    return finite_amax_scan(x);
#endif
  }

  template <int N, class T>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE packed<N> apply(const T (&x)[N], const scale_params& s) {
    float y[N];
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < N; ++i) y[i] = detail::to_float(x[i]) * s.quant_multiplier;
    if constexpr (Scale == scale_kind::e8m0) {
      // Only E8M0 blocks within a factor 2^max_exponent of FLT_MAX have a limit below max_finite:
      // one test per fragment, not a compare-and-select per element (a NaN compares false, stays).
      if (s.quant_limit < format_traits<Format>::max_finite) {
        RCCLX_DETAIL_FP8_UNROLL
        for (int i = 0; i < N; ++i) y[i] = limit(y[i], s);
      }
    }
    return encode_packed<Format, overflow::saturate, Path>(y);
  }

 private:
  template <int N, class T>
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint32_t finite_amax_scan(const T (&x)[N]) {
    std::uint32_t a = 0;
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < N; ++i) {
      const std::uint32_t b = detail::finite_abs_bits(x[i]);
      a = b > a ? b : a;
    }
    return a;
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE float limit(float y, const scale_params& s) {
    if constexpr (Scale == scale_kind::e8m0) {
      // Only blocks near FLT_MAX have a limit below max_finite; a NaN compares false and stays.
      if (s.quant_limit < format_traits<Format>::max_finite) {
        const float a = y < 0.0f ? -y : y;
        if (a > s.quant_limit) y = y < 0.0f ? -s.quant_limit : s.quant_limit;
      }
    }
    return y;
  }
  RCCLX_HOST_DEVICE static RCCLX_FORCEINLINE std::uint8_t encode_one(float x, const scale_params& s) {
    return encode<Format, overflow::saturate, Path>(limit(x * s.quant_multiplier, s));
  }
};

// Dequantizes codes with their block's scale: x = decode(q) * scale (then rounded to nearest even
// for bf16 output). Stateless; no lane cooperation needed.
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic>
struct block_dequantize {
  using format = Format;
  using scale_type = scale_type_t<Scale>;
  static constexpr int block_size = BlockSize;
  static constexpr scale_kind scale = Scale;

  template <int N, class T>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const packed<N>& q, scale_type s, T (&x)[N]) const {
    if constexpr (std::is_same<T, bf16>::value && N % 2 == 0) {
      std::uint32_t w[N / 2];
      to_bf16_pairs(q, s, w);
      RCCLX_DETAIL_FP8_UNROLL
      for (int i = 0; i < N / 2; ++i) {
        x[2 * i].bits = static_cast<std::uint16_t>(w[i]);
        x[2 * i + 1].bits = static_cast<std::uint16_t>(w[i] >> 16);
      }
    } else {
      const float m = block_scale<Format, Scale>::dequant_multiplier(s);
      float f[N];
      decode_packed<Format, Path>(q, f);
      RCCLX_DETAIL_FP8_UNROLL
      for (int i = 0; i < N; ++i) x[i] = detail::from_float<T>(f[i] * m);
    }
  }

  // bf16 output as packed pairs (element 2i in the low half of w[i]), ready for vector stores.
  // Same bits as the element form (see detail::floats_to_bf16_pairs).
  template <int N>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void to_bf16_pairs(const packed<N>& q, scale_type s, std::uint32_t (&w)[N / 2]) const {
    static_assert(N % 2 == 0, "to_bf16_pairs: an even number of codes");
    const float m = block_scale<Format, Scale>::dequant_multiplier(s);
    float f[N];
    decode_packed<Format, Path>(q, f);
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < N; ++i) f[i] *= m;
    detail::floats_to_bf16_pairs(f, w);
  }

  // Memory form: out[i] = decode(in[i]) * scale for i in [0, count).
  template <class T>
  RCCLX_HOST_DEVICE void operator()(const std::uint8_t* in, scale_type s, T* out, int count = BlockSize) const {
    const float m = block_scale<Format, Scale>::dequant_multiplier(s);
    for (int i = 0; i < count; ++i) out[i] = detail::from_float<T>(decode<Format, Path>(in[i]) * m);
  }
};

}  // namespace fp8
RCCLX_NAMESPACE_END
