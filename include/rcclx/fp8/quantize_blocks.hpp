// rcclx/fp8/quantize_blocks.hpp: whole-buffer block-scaled FP8 quantize / dequantize: host
// launchers, the kernels, and the grid-stride device bodies to call from your own kernels.
//
//   namespace f8 = rcclx::fp8;
//   using L = f8::block_layout<32>;                        // payload n bytes + float scale per 32
//   f8::quantize_blocks<f8::e4m3>(x, n, payload, scales, stream);     // x: float* or rcclx::bf16*
//   f8::dequantize_blocks<f8::e4m3>(payload, scales, n, y, stream);   // y: float* or rcclx::bf16*
//   f8::quantize_blocks<f8::e4m3, 32, f8::scale_kind::e8m0>(x, n, payload, e8m0_scales, stream);
//
// Layout: see block_layout.hpp. Pointers to elements and payload must be 16-byte aligned; any n
// (the last block may be partial; its missing elements are not written). On the host backend the
// launchers run the same bodies on the calling thread.
//
// Traffic (per element): quantize reads sizeof(T) and writes 1 + sizeof(scale)/BlockSize bytes;
// dequantize reads 1 + sizeof(scale)/BlockSize and writes sizeof(T). One pass, no shared memory:
// on GPUs each lane converts 16 bytes of elements (4 floats or 8 bf16) per fragment, BlockSize/that
// neighbouring lanes combine their block's amax with log2 of that many shuffles, and each lane
// keeps Unroll independent fragments in flight (twice that with bulk_prefetch).
//
// Tuning (steps in flight, elements per lane, cache hints, software prefetch, grid size, block
// size) is a last template argument, fp8::bulk_tuning<...>; the measured defaults per element type
// and scale kind live in one place, detail::bulk_defaults below.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../gpu/memory.hpp"
#include "../gpu/runtime.hpp"
#include "../kernel/launch.hpp"
#include "block_scale.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

// ---- tuning ---------------------------------------------------------------------------------------
// Flags of bulk_tuning (bits, combine with |). Inputs and outputs of the bulk kernels are touched
// once, so cache hints only decide what the caches evict first.
enum bulk_flag : int {
  bulk_store_streaming = 1,  // outputs (codes / values) with evict-first stores: st.global.cs, AMD nontemporal
  bulk_load_streaming = 2,   // inputs with evict-first loads: ld.global.cs, AMD nontemporal (coherent)
  bulk_prefetch = 4,         // software pipeline: a lane issues its next round's loads before this
                             // round's math, so its loads stay in flight while it converts
  bulk_load_no_l1 = 8,       // NVIDIA: inputs with ld.global.L1::no_allocate (coherent); AMD: plain
};

// Compile-time tuning of the bulk kernels, the last template argument of quantize_blocks /
// dequantize_blocks and their _range bodies. Measured candidates: rcclx-bench-fp8 --suite gpu.
//   Unroll     fragments a lane loads (all of them in flight) before converting them: one "round"
//   LaneElems  elements per lane and fragment; 0 = the default: quantize 16 bytes of input (4 float,
//              8 bf16; more if a block would span more than 32 lanes), dequantize 16 bytes of output
//   Flags      bulk_flag bits
//   Waves      launchers only: grid = Waves x the blocks resident on the device at once, each thread
//              looping over rounds (grid-stride); 0 = one round per thread (a block per tile)
//   Threads    launchers only: threads per block (a multiple of 64, at most 1024)
//   MinBlocks  launchers only, NVIDIA: __launch_bounds__(Threads, MinBlocks) asks for registers so
//              that MinBlocks blocks fit per SM (8 x 256 threads = full occupancy = <= 32
//              registers); 0 = no constraint
template <int Unroll, int LaneElems = 0, int Flags = 0, int Waves = 1, int Threads = 256, int MinBlocks = 0>
struct bulk_tuning {
  static_assert(Unroll >= 1 && Unroll <= 8, "bulk_tuning: Unroll must be in [1, 8]");
  static_assert(LaneElems >= 0, "bulk_tuning: LaneElems must be >= 0 (0 = default)");
  static_assert((Flags & ~15) == 0, "bulk_tuning: Flags are bulk_flag bits");
  static_assert(Waves >= 0, "bulk_tuning: Waves must be >= 0 (0 = one round per thread)");
  static_assert(Threads >= 64 && Threads <= 1024 && Threads % 64 == 0,
                "bulk_tuning: Threads must be a multiple of 64 in [64, 1024]");
  static constexpr int unroll = Unroll;
  static constexpr int lane_elems = LaneElems;
  static constexpr int flags = Flags;
  static constexpr int waves = Waves;
  static constexpr int threads = Threads;
  static constexpr int min_blocks = MinBlocks;
  static_assert(MinBlocks >= 0 && MinBlocks * Threads <= 2048, "bulk_tuning: MinBlocks x Threads must be <= 2048");
};

namespace detail {

// ---- THE DEFAULTS: one line per kernel of rcclx-bench-fp8's table, the only place to change them ----
// Each `using` is spelled exactly as the tuning sweep prints its candidates ("tune ... <tuning>").
// Measured on an H200 (64 Mi elements, vs a copy of the same bytes): quantize f32 U4 92% -> U2 97.7%;
// bf16 U4 80.7% -> U1 87.4%; dequantize f32 U4 88% -> U2 + streaming stores 90.4%.
// Current choice, from the H200 sweep of 2026-11-29 (docs/performance.md): f32 quantize U2 on a
// resident grid-stride grid; bf16 quantize and every dequantize U2 with one block per tile
// (Waves = 0), dequantize with streaming stores. Prefetch and MinBlocks lost on the H200.
#if RCCLX_BACKEND_GPU
template <class T, scale_kind Scale>
struct bulk_defaults {  // bf16 (the primary template also serves unsupported types until their static_assert)
  // Measured on the H200 (rcclx-bench-fp8 sweep, 2026-11-29, 64 Mi elements): one block per tile
  // (grid = tiles, no grid-stride loop) with 2 fragments per lane reached 100.4% of a same-bytes
  // copy for bf16 quantize (U1 + prefetch: 94.3%) and 96.6-98.2% for every dequantize (U2 + st.cs
  // on a resident grid-stride grid: 86-91%).
  using quantize = bulk_tuning<2, 0, 0, 0, 256, 0>;
  using dequantize = bulk_tuning<2, 0, bulk_store_streaming, 0, 256, 0>;
};
template <scale_kind Scale>
struct bulk_defaults<float, Scale> {
  using quantize = bulk_tuning<2, 0, 0, 1, 256, 0>;  // 98.7% (U1 + prefetch 99.3%: within noise)
  using dequantize = bulk_tuning<2, 0, bulk_store_streaming, 0, 256, 0>;
};
// A default per scale kind too: specialise, e.g. `template <> struct bulk_defaults<bf16,
// scale_kind::e8m0> { using quantize = ...; using dequantize = ...; };` right here.
#else
template <class T, scale_kind Scale>
struct bulk_defaults {  // host backend: one thread converts whole blocks
  using quantize = bulk_tuning<1>;
  using dequantize = bulk_tuning<1>;
};
#endif

template <class T>
inline constexpr bool is_block_element_v = std::is_same<T, float>::value || std::is_same<T, bf16>::value;

// Elements each lane quantizes per fragment: 16 bytes on GPUs (one vector load), more if a block
// would otherwise span more than 32 lanes; the whole block on the host backend (one "lane").
template <class Tuning, int BlockSize, class T>
RCCLX_HOST_DEVICE constexpr int quantize_lane_elems() {
#if RCCLX_BACKEND_GPU
  constexpr int v = static_cast<int>(16 / sizeof(T));
  return Tuning::lane_elems != 0 ? Tuning::lane_elems : v > BlockSize / 32 ? v : BlockSize / 32;
#else
  return BlockSize;
#endif
}
template <class Tuning, class T>
RCCLX_HOST_DEVICE constexpr int dequantize_lane_elems() {
  return Tuning::lane_elems != 0 ? Tuning::lane_elems : static_cast<int>(16 / sizeof(T));  // one 16-byte store
}

// ---- memory accesses with the tuning's hints (Words 32-bit words at p, aligned to their size) ----
template <int Flags, int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_words(const void* p, std::uint32_t (&w)[Words]) {
  static_assert(Words == 1 || Words == 2 || Words == 4, "load_words: 4, 8 or 16 bytes");
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  if constexpr (Flags & bulk_load_streaming) {
    if constexpr (Words == 4) {
      asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    } else if constexpr (Words == 2) {
      asm volatile("ld.global.cs.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    } else {
      asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
    }
    return;
  } else if constexpr (Flags & bulk_load_no_l1) {
    if constexpr (Words == 4) {
      asm volatile("ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
    } else if constexpr (Words == 2) {
      asm volatile("ld.global.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
    } else {
      asm volatile("ld.global.L1::no_allocate.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
    }
    return;
  }
#elif RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  if constexpr ((Flags & bulk_load_streaming) != 0) {
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < Words; ++i) w[i] = __builtin_nontemporal_load(static_cast<const std::uint32_t*>(p) + i);
    return;
  }
#endif
#if RCCLX_DEVICE_COMPILE
  if constexpr (Words == 4) {
    const gpu::vec16 v = gpu::load16(p);  // ld.global.v4 (never the read-only path)
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < 4; ++i) w[i] = v.w[i];
  } else if constexpr (Words == 2) {
    const std::uint64_t v = *static_cast<const std::uint64_t*>(p);
    w[0] = static_cast<std::uint32_t>(v);
    w[1] = static_cast<std::uint32_t>(v >> 32);
  } else {
    w[0] = *static_cast<const std::uint32_t*>(p);
  }
#else
  std::memcpy(w, p, 4 * Words);
#endif
}

template <int Flags, int Words>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_words(void* p, const std::uint32_t (&w)[Words]) {
  static_assert(Words == 1 || Words == 2 || Words == 4, "store_words: 4, 8 or 16 bytes");
#if RCCLX_BACKEND_CUDA && RCCLX_DEVICE_COMPILE
  if constexpr (Flags & bulk_store_streaming) {
    if constexpr (Words == 4) {
      asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                   : "memory");
    } else if constexpr (Words == 2) {
      asm volatile("st.global.cs.v2.u32 [%0], {%1,%2};" ::"l"(p), "r"(w[0]), "r"(w[1]) : "memory");
    } else {
      asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(w[0]) : "memory");
    }
    return;
  }
#elif RCCLX_BACKEND_HIP && RCCLX_DEVICE_COMPILE
  if constexpr ((Flags & bulk_store_streaming) != 0) {
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < Words; ++i) __builtin_nontemporal_store(w[i], static_cast<std::uint32_t*>(p) + i);
    return;
  }
#endif
#if RCCLX_DEVICE_COMPILE
  if constexpr (Words == 4) {
    gpu::vec16 v;
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < 4; ++i) v.w[i] = w[i];
    gpu::store16(p, v);
  } else if constexpr (Words == 2) {
    *static_cast<std::uint64_t*>(p) = static_cast<std::uint64_t>(w[0]) | (static_cast<std::uint64_t>(w[1]) << 32);
  } else {
    *static_cast<std::uint32_t*>(p) = w[0];
  }
#else
  std::memcpy(p, w, 4 * Words);
#endif
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

}  // namespace detail

namespace detail {

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

// Grid-stride body of quantize_blocks, for your own kernels. Call from `num_threads` threads with
// ids `thread` in [0, num_threads), all of them (the lanes sharing a block exchange values, so
// warps must be whole and converged: num_threads a multiple of 32, thread ids consecutive within
// a warp, e.g. blockIdx.x * blockDim.x + threadIdx.x with blockDim.x a multiple of 32).
//
// Work is cut in rounds of Unroll x num_threads fragments; a lane loads its Unroll fragments of a
// round (all in flight), then converts and stores them. The round count is the same for every
// thread, so lanes sharing a block always run together. Rounds that lie wholly inside [0, n) (all
// but the last) take a path without per-fragment bounds checks.
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, class Tuning = typename detail::bulk_defaults<T, Scale>::quantize>
RCCLX_HOST_DEVICE void quantize_blocks_range(const T* in, std::size_t n, std::uint8_t* payload,
                                             scale_type_t<Scale>* scales, std::size_t thread,
                                             std::size_t num_threads) {
  constexpr int U = Tuning::unroll;
  constexpr int E = detail::quantize_lane_elems<Tuning, BlockSize, T>();
  if (detail::bulk_fits_32<E>(n, U * num_threads)) {
    detail::quantize_body<Format, BlockSize, Scale, Path, T, Tuning, std::uint32_t>(
        in, static_cast<std::uint32_t>(n), payload, scales, static_cast<std::uint32_t>(thread),
        static_cast<std::uint32_t>(num_threads));
  } else {
    detail::quantize_body<Format, BlockSize, Scale, Path, T, Tuning, std::size_t>(in, n, payload, scales, thread,
                                                                                 num_threads);
  }
}

// Grid-stride body of dequantize_blocks (no cooperation between threads needed). Rounds as in
// quantize_blocks_range; each fragment is LaneElems codes (default: 16 bytes of output) and its
// block's scale.
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, class Tuning = typename detail::bulk_defaults<T, Scale>::dequantize>
RCCLX_HOST_DEVICE void dequantize_blocks_range(const std::uint8_t* payload, const scale_type_t<Scale>* scales,
                                               std::size_t n, T* out, std::size_t thread, std::size_t num_threads) {
  constexpr int U = Tuning::unroll;
  constexpr int E = detail::dequantize_lane_elems<Tuning, T>();
  if (detail::bulk_fits_32<E>(n, U * num_threads)) {
    detail::dequantize_body<Format, BlockSize, Scale, Path, T, Tuning, std::uint32_t>(
        payload, scales, static_cast<std::uint32_t>(n), out, static_cast<std::uint32_t>(thread),
        static_cast<std::uint32_t>(num_threads));
  } else {
    detail::dequantize_body<Format, BlockSize, Scale, Path, T, Tuning, std::size_t>(payload, scales, n, out, thread,
                                                                                   num_threads);
  }
}

namespace detail {
// The launchers' kernels: one per index width I (the launchers pick 32-bit indices whenever they
// fit, so that kernel never holds the registers of the 64-bit body), run through the one launch
// path (kernel/launch.hpp). __launch_bounds__(Threads, MinBlocks) only for Tuning::min_blocks > 0:
// a kernel without the attribute keeps the compiler's own register heuristics, which a bound of
// (Threads, 1) would change (HIP: the thread bound only; its second argument means something else).
template <class Tuning, class I, class Args>
struct bulk_body {
  static constexpr int max_threads = Tuning::threads;
  static constexpr int min_blocks = Tuning::min_blocks;
  static constexpr bool bounded = Tuning::min_blocks > 0;
  Args args;
  template <class Group>
  RCCLX_HOST_DEVICE void operator()(const Group& g, int block, int num_blocks) const {
#if RCCLX_DEVICE_COMPILE
    // The 1-D index from the built-ins (the launchers' grids are 1-D): block_group's 3-D thread
    // rank would add instructions to a kernel that runs at the memory's speed.
    (void)g, (void)block, (void)num_blocks;
    args.template run<I>(static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x, static_cast<I>(gridDim.x) * blockDim.x);
#else
    args.range(static_cast<std::size_t>(block) * g.size() + g.thread_rank(),
               static_cast<std::size_t>(num_blocks) * g.size());
#endif
  }
};

template <class Format, int BlockSize, scale_kind Scale, path Path, class T, class Tuning>
struct quantize_args {
  const T* in;
  std::size_t n;
  std::uint8_t* payload;
  scale_type_t<Scale>* scales;
  template <class I>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void run(I thread, I threads) const {
    quantize_body<Format, BlockSize, Scale, Path, T, Tuning, I>(in, static_cast<I>(n), payload, scales, thread, threads);
  }
  RCCLX_HOST_DEVICE void range(std::size_t thread, std::size_t threads) const {
    quantize_blocks_range<Format, BlockSize, Scale, Path, T, Tuning>(in, n, payload, scales, thread, threads);
  }
};

template <class Format, int BlockSize, scale_kind Scale, path Path, class T, class Tuning>
struct dequantize_args {
  const std::uint8_t* payload;
  const scale_type_t<Scale>* scales;
  std::size_t n;
  T* out;
  template <class I>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void run(I thread, I threads) const {
    dequantize_body<Format, BlockSize, Scale, Path, T, Tuning, I>(payload, scales, static_cast<I>(n), out, thread,
                                                                  threads);
  }
  RCCLX_HOST_DEVICE void range(std::size_t thread, std::size_t threads) const {
    dequantize_blocks_range<Format, BlockSize, Scale, Path, T, Tuning>(payload, scales, n, out, thread, threads);
  }
};
}  // namespace detail

namespace detail {
inline void check_bulk_pointer(const void* p, std::size_t alignment, const char* fn, const char* arg) {
  if (p == nullptr) throw error(errc::invalid_argument, std::string(fn) + ": " + arg + " is null");
  if (!gpu::is_aligned(p, alignment))
    throw error(errc::misaligned, std::string(fn) + ": " + arg + " must be " + std::to_string(alignment) +
                                      "-byte aligned (got address " +
                                      std::to_string(reinterpret_cast<std::uintptr_t>(p)) + ")");
}

#if RCCLX_BACKEND_GPU
// Tuning::waves x the blocks resident on the device at once (the bodies are grid-stride), fewer
// for small inputs; Waves 0: a block per tile. The occupancy query runs once per kernel (it costs
// microseconds); the SM count per launch.
template <auto Kernel, class Tuning>
inline unsigned bulk_grid(std::size_t frags) {
  static const int per_sm = [] {
    const int r = gpu::max_resident_blocks(Kernel, Tuning::threads) / gpu::multiprocessor_count();
    return r > 0 ? r : 1;
  }();
  const std::size_t per_block = static_cast<std::size_t>(Tuning::threads) * Tuning::unroll;
  std::size_t g = (frags + per_block - 1) / per_block;
  if (Tuning::waves > 0) {
    const std::size_t resident = static_cast<std::size_t>(Tuning::waves) * per_sm * gpu::multiprocessor_count();
    g = g < resident ? g : resident;
  }
  g = g < 0x7FFFFFFFu ? g : 0x7FFFFFFFu;  // grid-stride beyond that
  return static_cast<unsigned>(g > 0 ? g : 1);
}
#endif

// Launches `args` over n elements in fragments of E: the 32-bit-index kernel whenever its indices
// fit, else the 64-bit one (both preloaded at the first launch). Host backend: one thread.
template <class Tuning, int E, class Args>
inline void launch_bulk(const char* who, std::size_t n, const Args& args, gpu::stream_t stream) {
  using b32 = bulk_body<Tuning, std::uint32_t, Args>;
#if RCCLX_BACKEND_GPU
  using b64 = bulk_body<Tuning, std::size_t, Args>;
  const unsigned grid = bulk_grid<kernel::grid_kernel_of<b32>(), Tuning>((n + E - 1) / E);
  const kernel::grid_shape shape{static_cast<int>(grid), Tuning::threads};
  if (bulk_fits_32<E>(n, std::size_t(Tuning::unroll) * grid * Tuning::threads))
    kernel::launch(who, shape, b32{args}, stream, kernel::also_preload<b64>{});
  else
    kernel::launch(who, shape, b64{args}, stream, kernel::also_preload<b32>{});
#else
  (void)n;
  kernel::launch(who, {1, 1}, b32{args}, stream);
#endif
}
}  // namespace detail

// Quantizes in[0, n) into payload[0, n) (codes) and scales[0, num_blocks(n)) (one per block).
// Tuning: see bulk_tuning; the default is the measured one for T and Scale (detail::bulk_defaults).
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, class Tuning = typename detail::bulk_defaults<T, Scale>::quantize>
inline void quantize_blocks(const T* in, std::size_t n, std::uint8_t* payload, scale_type_t<Scale>* scales,
                            gpu::stream_t stream = gpu::stream_t{}) {
  static_assert(detail::is_block_element_v<T>, "quantize_blocks: elements must be float or rcclx::bf16");
  if (n == 0) return;
  detail::check_bulk_pointer(in, 16, "quantize_blocks", "in");
  detail::check_bulk_pointer(payload, 16, "quantize_blocks", "payload");
  detail::check_bulk_pointer(scales, alignof(scale_type_t<Scale>), "quantize_blocks", "scales");
  detail::launch_bulk<Tuning, detail::quantize_lane_elems<Tuning, BlockSize, T>()>(
      "rcclx::fp8::quantize_blocks", n,
      detail::quantize_args<Format, BlockSize, Scale, Path, T, Tuning>{in, n, payload, scales}, stream);
}

// out[i] = decode(payload[i]) * scale of block i / BlockSize, for i in [0, n).
// Tuning: see bulk_tuning; the default is the measured one for T and Scale (detail::bulk_defaults).
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, class Tuning = typename detail::bulk_defaults<T, Scale>::dequantize>
inline void dequantize_blocks(const std::uint8_t* payload, const scale_type_t<Scale>* scales, std::size_t n, T* out,
                              gpu::stream_t stream = gpu::stream_t{}) {
  static_assert(detail::is_block_element_v<T>, "dequantize_blocks: elements must be float or rcclx::bf16");
  if (n == 0) return;
  detail::check_bulk_pointer(payload, 16, "dequantize_blocks", "payload");
  detail::check_bulk_pointer(scales, alignof(scale_type_t<Scale>), "dequantize_blocks", "scales");
  detail::check_bulk_pointer(out, 16, "dequantize_blocks", "out");
  detail::launch_bulk<Tuning, detail::dequantize_lane_elems<Tuning, T>()>(
      "rcclx::fp8::dequantize_blocks", n,
      detail::dequantize_args<Format, BlockSize, Scale, Path, T, Tuning>{payload, scales, n, out}, stream);
}

}  // namespace fp8
RCCLX_NAMESPACE_END
