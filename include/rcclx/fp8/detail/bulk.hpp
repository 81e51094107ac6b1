// rcclx/fp8/detail/bulk.hpp: the bodies of the bulk FP8 kernels (fp8/quantize_blocks.hpp): the
// fragment loads and stores with the tuning's cache hints, and the grid-stride quantize and
// dequantize loops over rounds of Unroll fragments per lane.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../../gpu/streaming.hpp"
#include "../block_scale.hpp"
#include "../bulk_tuning.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {
namespace detail {

// ---- memory accesses with the tuning's hints (Words 32-bit words at p, aligned to their size) ----
// Streaming wins over no-L1 where a tuning sets both; AMD has no no-L1 load (a plain one there).
template <int Flags, int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_words(const void* p, std::uint32_t (&w)[Words]) {
  if constexpr ((Flags & bulk_load_streaming) != 0) {
    gpu::load_words<gpu::cache_hint::streaming>(p, w);
  } else if constexpr ((Flags & bulk_load_no_l1) != 0) {
    gpu::load_words_no_l1(p, w);
  } else {
    gpu::load_words<gpu::cache_hint::normal>(p, w);
  }
}

template <int Flags, int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_words(void* p, const std::uint32_t (&w)[Words]) {
  constexpr auto hint = (Flags & bulk_store_streaming) != 0 ? gpu::cache_hint::streaming : gpu::cache_hint::normal;
  gpu::store_words<hint>(p, w);
}

// A whole fragment of E elements at p (16-byte aligned on GPUs).
template <int E, int Flags, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_elements(const T* p, T (&x)[E]) {
#if RCCLX_DEVICE_COMPILE
  constexpr int per_vec = static_cast<int>(16 / sizeof(T));
  static_assert(E % per_vec == 0, "a quantize fragment must be whole 16-byte vectors");
  RCCLX_DETAIL_FP8_UNROLL
  for (int v = 0; v < E / per_vec; ++v) {
    std::uint32_t w[4];
    load_words<Flags, 4>(p + v * per_vec, w);
    RCCLX_DETAIL_FP8_UNROLL
    for (int j = 0; j < 4; ++j) {
      if constexpr (std::is_same<T, float>::value) {
        x[v * 4 + j] = bits_float(w[j]);
      } else {
        x[v * 8 + 2 * j].bits = static_cast<std::uint16_t>(w[j]);
        x[v * 8 + 2 * j + 1].bits = static_cast<std::uint16_t>(w[j] >> 16);
      }
    }
  }
#else
  for (int i = 0; i < E; ++i) x[i] = p[i];
#endif
}

// Fragment f of in[0, n): elements [f*E, f*E + E), zero past n (all zero when f*E >= n).
template <int E, int Flags, class T, class I>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_fragment(const T* in, I n, I f, T (&x)[E]) {
  const I first = f * E;
  if (first + E <= n) {
    load_elements<E, Flags>(in + first, x);
  } else {
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < E; ++i) {
      if (first + i < n) {
        x[i] = in[first + i];
      } else if constexpr (std::is_same<T, float>::value) {
        x[i] = 0.0f;
      } else {
        x[i].bits = 0;
      }
    }
  }
}

// N codes at p (aligned to min(N, 16) bytes), N a multiple of 4.
template <int Flags, int N>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE packed<N> load_codes(const std::uint8_t* p) {
  static_assert(N % 4 == 0, "bulk fragments hold a multiple of 4 codes");
  packed<N> q;
  if constexpr (N >= 16) {
    static_assert(N % 16 == 0, "more than 16 codes per fragment: whole 16-byte vectors");
    RCCLX_DETAIL_FP8_UNROLL
    for (int c = 0; c < N / 16; ++c) {
      std::uint32_t w[4];
      load_words<Flags, 4>(p + 16 * c, w);
      RCCLX_DETAIL_FP8_UNROLL
      for (int j = 0; j < 4; ++j) q.w[4 * c + j] = w[j];
    }
  } else {
    std::uint32_t w[N / 4];
    load_words<Flags, N / 4>(p, w);
    RCCLX_DETAIL_FP8_UNROLL
    for (int j = 0; j < N / 4; ++j) q.w[j] = w[j];
  }
  return q;
}

template <int Flags, int N>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_codes(std::uint8_t* p, const packed<N>& q) {
  if constexpr (N >= 16) {
    static_assert(N % 16 == 0, "more than 16 codes per fragment: whole 16-byte vectors");
    RCCLX_DETAIL_FP8_UNROLL
    for (int c = 0; c < N / 16; ++c) {
      const std::uint32_t w[4] = {q.w[4 * c], q.w[4 * c + 1], q.w[4 * c + 2], q.w[4 * c + 3]};
      store_words<Flags, 4>(p + 16 * c, w);
    }
  } else if constexpr (N % 4 == 0) {
    std::uint32_t w[N / 4];
    RCCLX_DETAIL_FP8_UNROLL
    for (int j = 0; j < N / 4; ++j) w[j] = q.w[j];
    store_words<Flags, N / 4>(p, w);
  } else {
    q.store(p);
  }
}

// Fragment f of payload[0, n) (codes past n are not written).
template <int E, int Flags, class I>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_code_fragment(std::uint8_t* payload, I n, I f, const packed<E>& q) {
  const I first = f * E;
  if (first + E <= n) {
#if RCCLX_DEVICE_COMPILE
    store_codes<Flags>(payload + first, q);
#else
    q.store(payload + first);  // host fragments are whole blocks: any size
#endif
  } else {
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < E; ++i)  // constant indices after unrolling: q stays in registers
      if (first + i < n) payload[first + i] = q[i];
  }
}

// Dequantized fragment as 32-bit words of output (E * sizeof(T) / 4 of them).
template <class Dequant, int E, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void dequantize_words(const Dequant& dequant, const packed<E>& q,
                                                          typename Dequant::scale_type s,
                                                          std::uint32_t (&w)[E * sizeof(T) / 4]) {
  if constexpr (std::is_same<T, bf16>::value) {
    dequant.to_bf16_pairs(q, s, w);
  } else {
    float y[E];
    dequant(q, s, y);
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < E; ++i) w[i] = float_bits(y[i]);
  }
}

template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE T element_of_words(const std::uint32_t* w, int i) {
  if constexpr (std::is_same<T, bf16>::value) {
    return bf16::from_bits(static_cast<std::uint16_t>(w[i / 2] >> (16 * (i % 2))));
  } else {
    return bits_float(w[i]);
  }
}

// Element and fragment indices are 32-bit when n and the rounds fit (fewer registers and
// instructions per fragment; every bulk launch below 2^31 elements), 64-bit otherwise.
template <int E>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE bool bulk_fits_32(std::size_t n, std::size_t round) {
  return n <= 0x7FFFFFFFu && round <= 0x0FFFFFFFu / E;
}

template <class Format, int BlockSize, scale_kind Scale, path Path, class T, class Tuning, class I>
RCCLX_HOST_DEVICE void quantize_body(const T* in, I n, std::uint8_t* payload, scale_type_t<Scale>* scales, I thread,
                                     I num_threads) {
  static_assert(detail::is_block_element_v<T>, "quantize_blocks: elements must be float or rcclx::bf16");
  constexpr int E = detail::quantize_lane_elems<Tuning, BlockSize, T>();
  constexpr int U = Tuning::unroll;
  constexpr int F = Tuning::flags;
  constexpr int lanes = BlockSize / E;
  static_assert(E >= 1 && BlockSize % E == 0, "quantize_blocks: LaneElems must divide BlockSize");
  static_assert(BlockSize >= E, "quantize_blocks: BlockSize must be at least 16 bytes of elements (4 float, 8 bf16)");
  static_assert(lanes <= 32, "quantize_blocks: a block may span at most 32 lanes (raise LaneElems)");
  const I num_frags = (n + E - 1) / E, full_frags = n / E, round = U * num_threads;
  const bool leader = thread % lanes == 0;  // fragment indices keep thread % lanes (num_threads % 32 == 0)
  const block_quantize<Format, BlockSize, Scale, Path> quant{};

  // Loads round `base` into x; fragments past n read as zeros (their codes are not stored).
  auto load_round = [&](I base, T (&x)[U][E]) {
    if (base + round <= full_frags) {  // the same answer in every thread
      RCCLX_DETAIL_FP8_UNROLL
      for (int u = 0; u < U; ++u) detail::load_elements<E, F>(in + (base + u * num_threads + thread) * E, x[u]);
    } else {
      RCCLX_DETAIL_FP8_UNROLL
      for (int u = 0; u < U; ++u) detail::load_fragment<E, F>(in, n, base + u * num_threads + thread, x[u]);
    }
  };

  T x[U][E];
  if constexpr ((F & bulk_prefetch) != 0) load_round(0, x);
  for (I base = 0; base < num_frags; base += round) {
    T next[U][E];
    if constexpr ((F & bulk_prefetch) != 0) {
      load_round(base + round, next);  // all zeros (no access) past the end
    } else {
      load_round(base, x);
    }
    const bool whole = base + round <= full_frags;
    RCCLX_DETAIL_FP8_UNROLL
    for (int u = 0; u < U; ++u) {
      const I f = base + u * num_threads + thread;
      packed<E> q;
      const auto s = quant(x[u], q);
      if (whole) {
#if RCCLX_DEVICE_COMPILE
        detail::store_codes<F>(payload + f * E, q);
#else
        q.store(payload + f * E);
#endif
        if (leader) scales[f / lanes] = s;
      } else if (f < num_frags) {
        detail::store_code_fragment<E, F>(payload, n, f, q);
        if (leader) scales[f / lanes] = s;
      }
    }
    if constexpr ((F & bulk_prefetch) != 0) {
      RCCLX_DETAIL_FP8_UNROLL
      for (int u = 0; u < U; ++u) {
        RCCLX_DETAIL_FP8_UNROLL
        for (int i = 0; i < E; ++i) x[u][i] = next[u][i];
      }
    }
  }
}


template <class Format, int BlockSize, scale_kind Scale, path Path, class T, class Tuning, class I>
RCCLX_HOST_DEVICE void dequantize_body(const std::uint8_t* payload, const scale_type_t<Scale>* scales, I n, T* out,
                                       I thread, I num_threads) {
  static_assert(detail::is_block_element_v<T>, "dequantize_blocks: elements must be float or rcclx::bf16");
  constexpr int E = detail::dequantize_lane_elems<Tuning, T>();
  constexpr int U = Tuning::unroll;
  constexpr int F = Tuning::flags;
  constexpr int W = static_cast<int>(E * sizeof(T) / 4);  // output words per fragment
  static_assert(BlockSize % E == 0, "dequantize_blocks: BlockSize must be a multiple of LaneElems");
  static_assert((E * sizeof(T)) % 16 == 0, "dequantize_blocks: LaneElems must make whole 16-byte stores");
  using scale_t = scale_type_t<Scale>;
  const I num_frags = (n + E - 1) / E, full_frags = n / E, round = U * num_threads;
  const block_dequantize<Format, BlockSize, Scale, Path> dequant{};

  auto load_round = [&](I base, packed<E> (&q)[U], scale_t (&s)[U]) {
    if (base + round <= full_frags) {
      RCCLX_DETAIL_FP8_UNROLL
      for (int u = 0; u < U; ++u) {
        const I f = base + u * num_threads + thread;
        q[u] = detail::load_codes<F, E>(payload + f * E);
        s[u] = scales[f / (BlockSize / E)];
      }
    } else {
      RCCLX_DETAIL_FP8_UNROLL
      for (int u = 0; u < U; ++u) {
        const I f = base + u * num_threads + thread;
        for (int i = 0; i < packed<E>::num_words; ++i) q[u].w[i] = 0;
        s[u] = scale_t{};
        if (f < num_frags) {
          if ((f + 1) * E <= n) {
            q[u] = detail::load_codes<F, E>(payload + f * E);
          } else {
            RCCLX_DETAIL_FP8_UNROLL
            for (int i = 0; i < E; ++i)
              if (f * E + i < n) q[u].set(i, payload[f * E + i]);
          }
          s[u] = scales[f / (BlockSize / E)];
        }
      }
    }
  };

  packed<E> q[U];
  scale_t s[U];
  if constexpr ((F & bulk_prefetch) != 0) load_round(0, q, s);
  for (I base = 0; base < num_frags; base += round) {
    packed<E> next_q[U];
    scale_t next_s[U];
    if constexpr ((F & bulk_prefetch) != 0) {
      load_round(base + round, next_q, next_s);
    } else {
      load_round(base, q, s);
    }
    const bool whole = base + round <= full_frags;
    RCCLX_DETAIL_FP8_UNROLL
    for (int u = 0; u < U; ++u) {
      const I f = base + u * num_threads + thread;
      std::uint32_t w[W];
      detail::dequantize_words<decltype(dequant), E, T>(dequant, q[u], s[u], w);
      if (whole || (f + 1) * E <= n) {
#if RCCLX_DEVICE_COMPILE
        RCCLX_DETAIL_FP8_UNROLL
        for (int k = 0; k < W / 4; ++k) {
          const std::uint32_t v[4] = {w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]};
          detail::store_words<F, 4>(out + f * E + k * (16 / sizeof(T)), v);
        }
#else
        for (int i = 0; i < E; ++i) out[f * E + i] = detail::element_of_words<T>(w, i);
#endif
      } else if (f < num_frags) {
        RCCLX_DETAIL_FP8_UNROLL
        for (int i = 0; i < E; ++i)
          if (f * E + i < n) out[f * E + i] = detail::element_of_words<T>(w, i);
      }
    }
    if constexpr ((F & bulk_prefetch) != 0) {
      RCCLX_DETAIL_FP8_UNROLL
      for (int u = 0; u < U; ++u) {
        q[u] = next_q[u];
        s[u] = next_s[u];
      }
    }
  }
}


}  // namespace detail
}  // namespace fp8
RCCLX_NAMESPACE_END
