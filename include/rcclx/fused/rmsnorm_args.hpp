// rcclx/fused/rmsnorm_args.hpp: the arguments of the ready-made residual-add + RMSNorm kernels
// (fused with an AllReduce in fused/allreduce_rmsnorm.hpp, alone in fused/add_rmsnorm.hpp), their
// launch shape and their checks.
//
//   rcclx::fused::rmsnorm_args<rcclx::bf16> a{x, residual, weight, out, tokens, hidden, 1e-6f};
//   rcclx::fused::rmsnorm_args<rcclx::bf16, rcclx::fp8::e4m3> q{x, residual, weight, codes, tokens,
//                                                                hidden, 1e-6f, scale};
//
// What the kernels compute, per row i of `tokens` rows of `hidden` elements (s = the AllReduce of
// every rank's input, rounded once to T, as dda::allreduce returns it; add_rmsnorm takes s as input):
//   residual[i] <- T(s[i] + residual[i])                           (FP32 add, one rounding)
//   output[i]   <- Out(residual[i] * rsqrt(mean(residual[i]^2) + eps) * weight)   (FP32)
// Out = T: rounded to nearest even; Out = an rcclx::fp8 format: codes of the value times 1 / *scale,
// saturating (vLLM's fused_add_rms_norm + static FP8 quantisation).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "../core/error.hpp"
#include "../core/float_types.hpp"
#include "../core/ops.hpp"
#include "../fp8/format.hpp"
#include "../gpu/memory.hpp"
#include "stages.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// Longest row (hidden) the ready-made kernels take: a block holds a whole row in registers.
inline constexpr std::size_t max_hidden = 16384;

// Out = per_token<F>: FP8 codes of format F with a dynamic scale per row (fused/fp8_per_token.hpp),
// written to rmsnorm_args::token_scales.
template <class Format>
struct per_token {
  static_assert(fp8::is_format_v<Format>, "rcclx::fused::per_token: Format must be an rcclx::fp8 format tag");
  using format = Format;
};
template <class Out>
struct is_per_token : std::false_type {};
template <class F>
struct is_per_token<per_token<F>> : std::true_type {};

namespace detail {
template <class T, class Out, class = void>
struct output_of {
  static_assert(std::is_same<T, Out>::value,
                "rcclx::fused::rmsnorm_args: Out must be T (same-type output) or an rcclx::fp8 format tag");
  using type = T;
  using stage = store<T>;
};
template <class T, class Out>
struct output_of<T, Out, std::enable_if_t<fp8::is_format_v<Out>>> {
  using type = std::uint8_t;
  using stage = fp8_out<Out>;
};
template <class T, class F>
struct output_of<T, per_token<F>> {
  using type = std::uint8_t;
  using stage = void;  // fp8_out_per_token<F, BlockThreads>: chosen by the kernel (fused/detail/rmsnorm_rows.hpp)
};
}  // namespace detail

// Element type of the output array: T, or std::uint8_t (FP8 codes) when Out is an FP8 format.
template <class T, class Out>
using output_t = typename detail::output_of<T, Out>::type;

template <class T, class Out = T>
struct rmsnorm_args {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::rmsnorm_args: T must be float, rcclx::bf16 or rcclx::fp16");
  using value_type = T;
  using output_type = output_t<T, Out>;
  static constexpr bool fp8_output = !std::is_same<T, Out>::value;

  const T* input;         // [tokens][hidden]: this rank's partial sums (add_rmsnorm: the AllReduce result)
  T* residual;            // [tokens][hidden]: read, then overwritten with the new residual (the
                          //   same on every rank: tree reads the copy of the row's owner)
  const T* weight;        // [hidden], the same on every rank
  output_type* output;    // [tokens][hidden]
  std::size_t tokens;
  std::size_t hidden;     // any in [1, max_hidden] (a multiple of 16 / sizeof(T): the vector kernels)
  float eps;
  const float* scale = nullptr;  // FP8 output: the per-tensor scale, in device memory
};

// Per-token FP8 output: the fields of rmsnorm_args with `token_scales` (and the format's qmax) for
// `scale`: output holds the codes, token_scales[i] row i's decoding scale (fused/fp8_per_token.hpp).
template <class T, class F>
struct rmsnorm_args<T, per_token<F>> {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::rmsnorm_args: T must be float, rcclx::bf16 or rcclx::fp16");
  using value_type = T;
  using output_type = std::uint8_t;
  static constexpr bool fp8_output = true;

  const T* input;
  T* residual;
  const T* weight;
  output_type* output;  // [tokens][hidden] codes
  std::size_t tokens;
  std::size_t hidden;   // any in [1, max_hidden]
  float eps;
  float* token_scales = nullptr;  // [tokens], device memory
  float qmax = fp8::format_traits<F>::max_finite;
};

// Threads per block and the cap on blocks per rank of the ready-made kernels.
struct rmsnorm_launch_config {
  int threads;
  int max_blocks;
};

// GPUs: 512 threads (a 16 KiB bf16 row is 2 vectors per thread, so one block reads a whole row
// from all peers in one round of loads) and 64 blocks (64 of 512 fit at once on every supported
// GPU). Host backend: one thread per block, 4 blocks (with emulated threads: 512 threads, 4 blocks).
RCCLX_HOST_DEVICE constexpr rmsnorm_launch_config default_rmsnorm_launch_config() {
  return RCCLX_BACKEND_GPU ? rmsnorm_launch_config{512, 64}
                           : (RCCLX_EMULATE_THREADS ? rmsnorm_launch_config{512, 4} : rmsnorm_launch_config{1, 4});
}

namespace detail {

// Vectors per thread a block of `threads` needs to hold a row of `hidden` elements of T.
template <class T>
inline int vecs_per_thread(std::size_t hidden, int threads) {
  const std::size_t vecs = (hidden + gpu::elems_per_vec16<T> - 1) / gpu::elems_per_vec16<T>;
  const std::size_t need = (vecs + static_cast<std::size_t>(threads) - 1) / static_cast<std::size_t>(threads);
  int v = 1;
  while (static_cast<std::size_t>(v) < need) v *= 2;
  return v;
}

// Largest VecsPerThread the ready-made kernels are instantiated for (rows up to max_hidden).
template <class T>
constexpr int max_vecs_per_thread() {
#if RCCLX_GPU_BLOCKS
  return static_cast<int>(max_hidden / gpu::elems_per_vec16<T> / 512);
#else
  return static_cast<int>(max_hidden / gpu::elems_per_vec16<T>);  // one thread holds the row
#endif
}

// Calls f(std::integral_constant<int, VPT>{}) for the smallest instantiated VPT >= vpt. The host
// backend instantiates the largest only (a thread's vectors past the row are never loaded; with
// emulated threads the largest is the GPU's, a few vectors per thread).
template <class T, int V = 1, class F>
inline void with_vecs_per_thread(int vpt, F&& f) {
#if RCCLX_BACKEND_GPU
  if constexpr (V < max_vecs_per_thread<T>()) {
    if (vpt > V) {
      with_vecs_per_thread<T, V * 2>(vpt, f);
      return;
    }
  }
  f(std::integral_constant<int, V>{});
#else
  (void)vpt;
  f(std::integral_constant<int, max_vecs_per_thread<T>()>{});
#endif
}

inline bool overlap(const void* a, std::size_t abytes, const void* b, std::size_t bbytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return abytes && bbytes && x < y + bbytes && y < x + abytes;
}

// Checks shared by every launcher: shapes, pointers, alignment, aliasing.
template <class T, class Out>
inline void check_rmsnorm_args(const char* who, const rmsnorm_args<T, Out>& a) {
  const std::string w(who);
  constexpr int e = gpu::elems_per_vec16<T>;
  if (a.hidden == 0)
    throw error(errc::invalid_argument, w + ": hidden = 0 must be positive");
  if (a.hidden > max_hidden)
    throw error(errc::unsupported, w + ": hidden = " + std::to_string(a.hidden) + " exceeds rcclx::fused::max_hidden = " +
                                       std::to_string(max_hidden) + " (a block holds a whole row in registers)");
  if (!(a.eps >= 0.0f) || !std::isfinite(a.eps))
    throw error(errc::invalid_argument, w + ": eps = " + std::to_string(a.eps) + " must be finite and >= 0");
  if (a.tokens > (std::size_t{1} << 31) / a.hidden)
    throw error(errc::invalid_argument, w + ": tokens = " + std::to_string(a.tokens) + " is too large");
  if (a.tokens == 0) return;
  // Rows of whole vectors are read as 16-byte vectors; other rows element by element.
  const std::size_t align = a.hidden % e == 0 ? 16 : sizeof(T);
  auto need = [&](const void* p, const char* name) {
    if (!p) throw error(errc::invalid_argument, w + ": " + name + " must not be null");
    if (!gpu::is_aligned(p, align))
      throw error(errc::misaligned, w + ": " + name + " = " + core::detail::pointer_text(p) + " is not " +
                                        std::to_string(align) + "-byte aligned");
  };
  need(a.input, "input");
  need(a.residual, "residual");
  need(a.weight, "weight");
  need(a.output, "output");
  if constexpr (is_per_token<Out>::value) {
    if (!a.token_scales || !gpu::is_aligned(a.token_scales, 4))
      throw error(errc::invalid_argument, w + ": token_scales must point to tokens floats (device memory, 4-byte aligned)");
    if (!(a.qmax > 0.0f) || !std::isfinite(a.qmax))
      throw error(errc::invalid_argument, w + ": qmax = " + std::to_string(a.qmax) + " must be finite and > 0");
    if (overlap(a.token_scales, a.tokens * 4, a.output, a.tokens * a.hidden) ||
        overlap(a.token_scales, a.tokens * 4, a.residual, a.tokens * a.hidden * sizeof(T)))
      throw error(errc::invalid_argument, w + ": token_scales overlaps the output or the residual");
  } else if (rmsnorm_args<T, Out>::fp8_output && !a.scale) {
    throw error(errc::invalid_argument, w + ": scale must point to the FP8 output's scale (device memory)");
  }
  const std::size_t rows = a.tokens * a.hidden;
  const std::size_t in_b = rows * sizeof(T), out_b = rows * sizeof(output_t<T, Out>);
  if (overlap(a.input, in_b, a.residual, in_b))
    throw error(errc::invalid_argument, w + ": input and residual overlap (they must be disjoint)");
  if (overlap(a.input, in_b, a.output, out_b))
    throw error(errc::invalid_argument, w + ": input and output overlap (they must be disjoint)");
  if (overlap(a.residual, in_b, a.output, out_b))
    throw error(errc::invalid_argument, w + ": residual and output overlap (they must be disjoint)");
}

}  // namespace detail
}  // namespace fused
RCCLX_NAMESPACE_END
