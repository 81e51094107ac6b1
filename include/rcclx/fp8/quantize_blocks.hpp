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
// on GPUs each lane converts 16 bytes of elements (4 floats or 8 bf16) per step, BlockSize/that
// neighbouring lanes combine their block's amax with log2 of that many shuffles, and each lane
// keeps 4 independent 16-byte loads in flight.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../gpu/memory.hpp"
#include "../gpu/runtime.hpp"
#include "block_scale.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

namespace detail {

template <class T>
inline constexpr bool is_block_element_v = std::is_same<T, float>::value || std::is_same<T, bf16>::value;

// Elements each lane quantizes per step: 16 bytes on GPUs (so one vector load), more if a block
// would otherwise span more than 32 lanes; the whole block on the host backend (one "lane").
template <int BlockSize, class T>
RCCLX_HOST_DEVICE constexpr int quantize_lane_elems() {
#if RCCLX_BACKEND_GPU
  constexpr int v = static_cast<int>(16 / sizeof(T));
  return v > BlockSize / 32 ? v : BlockSize / 32;
#else
  return BlockSize;
#endif
}
template <class T>
RCCLX_HOST_DEVICE constexpr int dequantize_lane_elems() {
  return static_cast<int>(16 / sizeof(T));  // one 16-byte store of output per step
}
#if RCCLX_BACKEND_GPU
inline constexpr int bulk_unroll = 4;      // independent 16-byte loads in flight per lane
inline constexpr int bulk_threads = 256;
#else
inline constexpr int bulk_unroll = 1;
#endif
// Measured defaults (rcclx-bench-fp8 tuning sweep on an H200, 64 Mi elements; docs/performance.md):
// fewer steps in flight per lane won (more resident warps), and streaming stores helped the
// dequantize, whose output is 4/5 of its traffic. AMD defaults are the same, unmeasured.
template <class T>
RCCLX_HOST_DEVICE constexpr int quantize_unroll() {
#if RCCLX_BACKEND_GPU
  return sizeof(T) == 4 ? 2 : 1;  // f32: U2 97.7% vs U4 92% of a same-bytes copy; bf16: U1 87% vs U4 81%
#else
  return 1;
#endif
}
template <class T>
RCCLX_HOST_DEVICE constexpr int dequantize_unroll() {
#if RCCLX_BACKEND_GPU
  return 2;  // f32 out: U2 + streaming stores 90.4% vs U4 88%
#else
  return 1;
#endif
}
inline constexpr int dequantize_hint = 1;  // streaming (evict-first) stores of the output

// Loads elements [f*E, f*E + E) of in[0, n), zero-filling past n.
// Hint (tuning): 0 plain accesses; bit 0: streaming (evict-first) stores of the outputs; bit 1:
// streaming loads of the inputs. Inputs and outputs of the bulk kernels are touched once.
template <int E, int Hint = 0, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_fragment(const T* in, std::size_t n, std::size_t f, T (&x)[E]) {
  const std::size_t first = f * E;
  if (first + E <= n) {
#if RCCLX_DEVICE_COMPILE
    constexpr int per_vec = static_cast<int>(16 / sizeof(T));
    static_assert(E % per_vec == 0, "fragment must be whole 16-byte vectors");
    RCCLX_DETAIL_FP8_UNROLL
    for (int v = 0; v < E / per_vec; ++v) {
      const gpu::vec16 w = (Hint & 2) ? gpu::load16_nontemporal(in + first + v * per_vec)
                                      : gpu::load16(in + first + v * per_vec);
      if constexpr (std::is_same<T, float>::value) {
        for (int j = 0; j < 4; ++j) x[v * 4 + j] = bits_float(w.w[j]);
      } else {
        for (int j = 0; j < 4; ++j) {
          x[v * 8 + 2 * j].bits = static_cast<std::uint16_t>(w.w[j]);
          x[v * 8 + 2 * j + 1].bits = static_cast<std::uint16_t>(w.w[j] >> 16);
        }
      }
    }
#else
    for (int i = 0; i < E; ++i) x[i] = in[first + i];
#endif
  } else {
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

template <int E>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_codes(std::uint8_t* payload, std::size_t n, std::size_t f,
                                                     const packed<E>& q) {
  const std::size_t first = f * E;
  if (first + E <= n) {
    q.store(payload + first);
  } else {
    RCCLX_DETAIL_FP8_UNROLL
    for (int i = 0; i < E; ++i)  // constant indices after unrolling: q stays in registers
      if (first + i < n) payload[first + i] = q[i];
  }
}

}  // namespace detail

// Grid-stride body of quantize_blocks, for your own kernels. Call from `num_threads` threads with
// ids `thread` in [0, num_threads), all of them (the lanes sharing a block exchange values, so
// warps must be whole and converged: num_threads a multiple of 32, thread ids consecutive within
// a warp, e.g. blockIdx.x * blockDim.x + threadIdx.x with blockDim.x a multiple of 32).
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, int Unroll = detail::quantize_unroll<T>(), int Hint = 0>
RCCLX_HOST_DEVICE void quantize_blocks_range(const T* in, std::size_t n, std::uint8_t* payload,
                                             scale_type_t<Scale>* scales, std::size_t thread,
                                             std::size_t num_threads) {
  static_assert(detail::is_block_element_v<T>, "quantize_blocks: elements must be float or rcclx::bf16");
  constexpr int E = detail::quantize_lane_elems<BlockSize, T>();
  constexpr int lanes = BlockSize / E;
  constexpr int U = Unroll;
  static_assert(BlockSize >= E, "quantize_blocks: BlockSize must be at least 16 bytes of elements (4 float, 8 bf16)");
  const std::size_t num_frags = (n + E - 1) / E;
  const block_quantize<Format, BlockSize, Scale, Path> quant{};
  // The loop bound is the same for every thread, so lanes sharing a block always run together.
  for (std::size_t base = 0; base < num_frags; base += U * num_threads) {
    T x[U][E];
    RCCLX_DETAIL_FP8_UNROLL
    for (int u = 0; u < U; ++u) detail::load_fragment<E, Hint>(in, n, base + u * num_threads + thread, x[u]);
    RCCLX_DETAIL_FP8_UNROLL
    for (int u = 0; u < U; ++u) {
      const std::size_t f = base + u * num_threads + thread;
      packed<E> q;
      const auto s = quant(x[u], q);
      if (f < num_frags) {
        detail::store_codes<E>(payload, n, f, q);
        if (f % lanes == 0) scales[f / lanes] = s;
      }
    }
  }
}

// Grid-stride body of dequantize_blocks (no cooperation between threads needed).
// LaneElems: elements per lane and step (16 bytes of output by default; 16 elements = a whole
// 16-byte load of codes, more bytes in flight per lane); Unroll: steps in flight per lane.
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, int Unroll = detail::dequantize_unroll<T>(), int LaneElems = detail::dequantize_lane_elems<T>(),
          int Hint = detail::dequantize_hint>
RCCLX_HOST_DEVICE void dequantize_blocks_range(const std::uint8_t* payload, const scale_type_t<Scale>* scales,
                                               std::size_t n, T* out, std::size_t thread, std::size_t num_threads) {
  static_assert(detail::is_block_element_v<T>, "dequantize_blocks: elements must be float or rcclx::bf16");
  constexpr int E = LaneElems;
  constexpr int U = Unroll;
  static_assert(BlockSize % E == 0, "dequantize_blocks: BlockSize must be a multiple of LaneElems");
  static_assert((E * sizeof(T)) % 16 == 0, "dequantize_blocks: LaneElems must make whole 16-byte stores");
  const std::size_t num_frags = (n + E - 1) / E;
  const block_dequantize<Format, BlockSize, Scale, Path> dequant{};
  // Every index below is a compile-time constant after unrolling, so nothing lives in local memory.
  for (std::size_t base = thread; base < num_frags; base += U * num_threads) {
    packed<E> q[U];
    scale_type_t<Scale> s[U];
    RCCLX_DETAIL_FP8_UNROLL
    for (int u = 0; u < U; ++u) {
      const std::size_t f = base + u * num_threads;
      for (int i = 0; i < packed<E>::num_words; ++i) q[u].w[i] = 0;
      s[u] = scale_type_t<Scale>{};
      if (f < num_frags) {
        if ((f + 1) * E <= n) {
          q[u] = packed<E>::load(payload + f * E);
        } else {
          RCCLX_DETAIL_FP8_UNROLL
          for (int i = 0; i < E; ++i)
            if (f * E + i < n) q[u].set(i, payload[f * E + i]);
        }
        s[u] = scales[f * E / BlockSize];
      }
    }
    RCCLX_DETAIL_FP8_UNROLL
    for (int u = 0; u < U; ++u) {
      const std::size_t f = base + u * num_threads;
      if (f < num_frags) {
        T y[E];
        dequant(q[u], s[u], y);
        if ((f + 1) * E <= n) {
#if RCCLX_DEVICE_COMPILE
          constexpr int per_vec = static_cast<int>(16 / sizeof(T));
          RCCLX_DETAIL_FP8_UNROLL
          for (int k = 0; k < E / per_vec; ++k) {
            gpu::vec16 v;
            __builtin_memcpy(&v, y + k * per_vec, 16);
            if (Hint & 1) gpu::store16_nontemporal(out + f * E + k * per_vec, v);
            else gpu::store16(out + f * E + k * per_vec, v);
          }
#else
          for (int i = 0; i < E; ++i) out[f * E + i] = y[i];
#endif
        } else {
          RCCLX_DETAIL_FP8_UNROLL
          for (int i = 0; i < E; ++i)
            if (f * E + i < n) out[f * E + i] = y[i];
        }
      }
    }
  }
}

#if RCCLX_BACKEND_GPU
template <class Format, int BlockSize, scale_kind Scale, path Path, class T, int Unroll, int Hint>
RCCLX_GLOBAL void quantize_blocks_kernel(const T* in, std::size_t n, std::uint8_t* payload,
                                         scale_type_t<Scale>* scales) {
  quantize_blocks_range<Format, BlockSize, Scale, Path, T, Unroll, Hint>(
      in, n, payload, scales, static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
      static_cast<std::size_t>(gridDim.x) * blockDim.x);
}

template <class Format, int BlockSize, scale_kind Scale, path Path, class T, int Unroll, int LaneElems, int Hint>
RCCLX_GLOBAL void dequantize_blocks_kernel(const std::uint8_t* payload, const scale_type_t<Scale>* scales,
                                           std::size_t n, T* out) {
  dequantize_blocks_range<Format, BlockSize, Scale, Path, T, Unroll, LaneElems, Hint>(
      payload, scales, n, out, static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
      static_cast<std::size_t>(gridDim.x) * blockDim.x);
}
#endif

namespace detail {
inline void check_bulk_pointer(const void* p, std::size_t alignment, const char* fn, const char* arg) {
  if (p == nullptr) throw error(errc::invalid_argument, std::string(fn) + ": " + arg + " is null");
  if (!gpu::is_aligned(p, alignment))
    throw error(errc::misaligned, std::string(fn) + ": " + arg + " must be " + std::to_string(alignment) +
                                      "-byte aligned (got address " +
                                      std::to_string(reinterpret_cast<std::uintptr_t>(p)) + ")");
}

#if RCCLX_BACKEND_GPU
// Enough blocks to fill the device once (the bodies are grid-stride), fewer for small inputs.
// The occupancy query runs once per kernel (it costs microseconds); the SM count per launch.
template <auto Kernel, int Unroll = bulk_unroll>
inline unsigned bulk_grid(std::size_t work_items) {
  static const int per_sm = [] {
    const int r = gpu::max_resident_blocks(Kernel, bulk_threads) / gpu::multiprocessor_count();
    return r > 0 ? r : 1;
  }();
  const std::size_t per_block = static_cast<std::size_t>(bulk_threads) * Unroll;
  const std::size_t wanted = (work_items + per_block - 1) / per_block;
  const std::size_t resident = static_cast<std::size_t>(per_sm) * gpu::multiprocessor_count();
  const std::size_t g = wanted < resident ? wanted : resident;
  return static_cast<unsigned>(g > 0 ? g : 1);
}
#endif
}  // namespace detail

// Quantizes in[0, n) into payload[0, n) (codes) and scales[0, num_blocks(n)) (one per block).
// Unroll (steps in flight per lane) is a tuning knob with a measured default.
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, int Unroll = detail::quantize_unroll<T>(), int Hint = 0>
inline void quantize_blocks(const T* in, std::size_t n, std::uint8_t* payload, scale_type_t<Scale>* scales,
                            gpu::stream_t stream = gpu::stream_t{}) {
  static_assert(detail::is_block_element_v<T>, "quantize_blocks: elements must be float or rcclx::bf16");
  if (n == 0) return;
  detail::check_bulk_pointer(in, 16, "quantize_blocks", "in");
  detail::check_bulk_pointer(payload, 16, "quantize_blocks", "payload");
  detail::check_bulk_pointer(scales, alignof(scale_type_t<Scale>), "quantize_blocks", "scales");
#if RCCLX_BACKEND_GPU
  constexpr auto kernel = quantize_blocks_kernel<Format, BlockSize, Scale, Path, T, Unroll, Hint>;
  constexpr int E = detail::quantize_lane_elems<BlockSize, T>();
  kernel<<<detail::bulk_grid<kernel, Unroll>((n + E - 1) / E), detail::bulk_threads, 0, stream>>>(in, n, payload, scales);
  gpu::check_launch("rcclx::fp8::quantize_blocks");
#else
  (void)stream;
  quantize_blocks_range<Format, BlockSize, Scale, Path, T, Unroll, Hint>(in, n, payload, scales, 0, 1);
#endif
}

// out[i] = decode(payload[i]) * scale of block i / BlockSize, for i in [0, n).
// Unroll and LaneElems are tuning knobs with measured defaults (see dequantize_blocks_range).
template <class Format, int BlockSize = 32, scale_kind Scale = scale_kind::fp32, path Path = path::automatic,
          class T, int Unroll = detail::dequantize_unroll<T>(), int LaneElems = detail::dequantize_lane_elems<T>(),
          int Hint = detail::dequantize_hint>
inline void dequantize_blocks(const std::uint8_t* payload, const scale_type_t<Scale>* scales, std::size_t n, T* out,
                              gpu::stream_t stream = gpu::stream_t{}) {
  static_assert(detail::is_block_element_v<T>, "dequantize_blocks: elements must be float or rcclx::bf16");
  if (n == 0) return;
  detail::check_bulk_pointer(payload, 16, "dequantize_blocks", "payload");
  detail::check_bulk_pointer(scales, alignof(scale_type_t<Scale>), "dequantize_blocks", "scales");
  detail::check_bulk_pointer(out, 16, "dequantize_blocks", "out");
#if RCCLX_BACKEND_GPU
  constexpr auto kernel = dequantize_blocks_kernel<Format, BlockSize, Scale, Path, T, Unroll, LaneElems, Hint>;
  constexpr int E = LaneElems;
  kernel<<<detail::bulk_grid<kernel, Unroll>((n + E - 1) / E), detail::bulk_threads, 0, stream>>>(payload, scales, n, out);
  gpu::check_launch("rcclx::fp8::dequantize_blocks");
#else
  (void)stream;
  dequantize_blocks_range<Format, BlockSize, Scale, Path, T, Unroll, LaneElems, Hint>(payload, scales, n, out, 0, 1);
#endif
}

}  // namespace fp8
RCCLX_NAMESPACE_END
