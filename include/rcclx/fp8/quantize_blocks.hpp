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
// launchers run the same bodies on one thread (kernel/launch.hpp's host launch).
//
// Traffic (per element): quantize reads sizeof(T) and writes 1 + sizeof(scale)/BlockSize bytes;
// dequantize reads 1 + sizeof(scale)/BlockSize and writes sizeof(T). One pass, no shared memory:
// on GPUs each lane converts 16 bytes of elements (4 floats or 8 bf16) per fragment, BlockSize/that
// neighbouring lanes combine their block's amax with log2 of that many shuffles, and each lane
// keeps Unroll independent fragments in flight (twice that with bulk_prefetch).
//
// Tuning (steps in flight, elements per lane, cache hints, software prefetch, grid size, block
// size) is a last template argument, fp8::bulk_tuning<...> (fp8/bulk_tuning.hpp, with the measured
// defaults per element type and scale kind: detail::bulk_defaults); the loops: fp8/detail/bulk.hpp.
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
#include "bulk_tuning.hpp"
#include "detail/bulk.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fp8 {

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
