// rcclx/multinode/detail/node_sum.hpp: the element-wise work of the inter-node hop after an engine
// AllGather: the parts of every node added in fp32 in node order 0..G-1 (plain, or each part
// dequantized from its block-scaled FP8 form first), rounded once to T. Every rank runs the same
// code on the same bytes, so every rank gets the same bits. A grid-stride kernel on GPUs (no host
// arguments that change between calls: graph-replay-safe), a loop on the calling thread on the host.
#pragma once

#include <cstddef>
#include <cstdint>

#include "../../core/ops.hpp"
#include "../../fp8/block_layout.hpp"
#include "../../fp8/fp8.hpp"
#include "../../gpu/runtime.hpp"

RCCLX_NAMESPACE_BEGIN
namespace multinode {
namespace detail {

RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float scale_value(float s) { return s; }
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float scale_value(fp8::e8m0 s) { return s.to_float(); }

// out[i] = T(sum over g in 0..parts-1 of fp32(base[g * stride + first + i])), i in [begin, n) by step.
template <class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void sum_parts_range(const T* base, int parts, std::size_t stride, std::size_t first,
                                                        std::size_t n, T* out, std::size_t begin, std::size_t step) {
  using tr = core::value_traits<T>;
  for (std::size_t i = begin; i < n; i += step) {
    typename tr::acc_type acc = tr::load(base[first + i]);
    for (int g = 1; g < parts; ++g) acc += tr::load(base[static_cast<std::size_t>(g) * stride + first + i]);
    out[i] = tr::store(acc);
  }
}

// Each part is a Config::layout buffer of `total` elements (payload, then scales), `part_bytes`
// apart: out[i] = T(sum over g of decode(payload_g[first + i]) * scale_g[(first + i) / BlockSize]).
template <class Config, class T>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void dequantize_sum_range(const std::uint8_t* base, int parts, std::size_t part_bytes,
                                                             std::size_t total, std::size_t first, std::size_t n, T* out,
                                                             std::size_t begin, std::size_t step) {
  using tr = core::value_traits<T>;
  using layout = typename Config::layout;
  for (std::size_t i = begin; i < n; i += step) {
    const std::size_t j = first + i;
    float acc = 0.0f;
    for (int g = 0; g < parts; ++g) {
      const std::uint8_t* part = base + static_cast<std::size_t>(g) * part_bytes;
      const float x = fp8::decode<typename Config::format>(part[j]) * scale_value(layout::scales(part, total)[j / Config::block_size]);
      acc = g == 0 ? x : acc + x;
    }
    out[i] = tr::store(acc);
  }
}

#if RCCLX_BACKEND_GPU
template <class T>
RCCLX_GLOBAL void sum_parts_kernel(const T* base, int parts, std::size_t stride, std::size_t first, std::size_t n, T* out) {
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  sum_parts_range(base, parts, stride, first, n, out, static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x, step);
}

template <class Config, class T>
RCCLX_GLOBAL void dequantize_sum_kernel(const std::uint8_t* base, int parts, std::size_t part_bytes, std::size_t total,
                                        std::size_t first, std::size_t n, T* out) {
  const std::size_t step = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  dequantize_sum_range<Config>(base, parts, part_bytes, total, first, n, out,
                               static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x, step);
}

inline unsigned node_sum_grid(std::size_t n) {
  const std::size_t g = (n + 255) / 256;
  return static_cast<unsigned>(g < 1024 ? (g > 0 ? g : 1) : 1024);
}
#endif

template <class T>
inline void sum_parts(const T* base, int parts, std::size_t stride, std::size_t first, std::size_t n, T* out,
                      gpu::stream_t stream) {
  if (n == 0) return;
#if RCCLX_BACKEND_GPU
  sum_parts_kernel<T><<<node_sum_grid(n), 256, 0, stream>>>(base, parts, stride, first, n, out);
  gpu::check_launch("rcclx::multinode::hierarchical (node-order sum)");
#else
  (void)stream;
  sum_parts_range(base, parts, stride, first, n, out, 0, 1);
#endif
}

template <class Config, class T>
inline void dequantize_sum(const std::uint8_t* base, int parts, std::size_t part_bytes, std::size_t total,
                           std::size_t first, std::size_t n, T* out, gpu::stream_t stream) {
  if (n == 0) return;
#if RCCLX_BACKEND_GPU
  dequantize_sum_kernel<Config, T><<<node_sum_grid(n), 256, 0, stream>>>(base, parts, part_bytes, total, first, n, out);
  gpu::check_launch("rcclx::multinode::hierarchical (FP8 node-order sum)");
#else
  (void)stream;
  dequantize_sum_range<Config>(base, parts, part_bytes, total, first, n, out, 0, 1);
#endif
}

}  // namespace detail
}  // namespace multinode
RCCLX_NAMESPACE_END
