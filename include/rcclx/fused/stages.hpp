// rcclx/fused/stages.hpp: the ready-made epilogue stages: bias, activations (SiLU, GELU, SwiGLU on
// interleaved gate/up), residual add, RMSNorm with weight, FP8 output with a per-tensor scale, and a
// plain store. Chain them with fused::epilogue; your own functor is a stage too (see
// fused/epilogue.hpp for the contract).
//
//   namespace fz = rcclx::fused;
//   auto& tmp = rcclx::gpu::block_shared<fz::rms_norm<rcclx::bf16, 512>::storage_type, struct norm_tag>();
//   fz::epilogue<fz::residual_add<rcclx::bf16>, fz::rms_norm<rcclx::bf16, 512>, fz::store<rcclx::bf16>> epi{
//       {residual, residual, hidden},      // residual += v; v = the new residual (rounded to bf16)
//       {weight, 1e-6f, hidden, &tmp},     // v = v / sqrt(mean(v^2) + eps) * weight
//       {out, hidden}};                    // out = bf16(v)
//
// With tile_map / row_tiles every pointer is 16-byte aligned and every leading dimension (ld, in
// elements) a multiple of the vector width E, so each vector is one aligned access; with the ragged
// maps (rows of any length, fused/epilogue.hpp) pointers and ld need only be element-aligned (the
// stages are then called element by element). Each stage's check() states its rules for the
// checked mode (fused/stage_check.hpp); stage_id: 1 residual_add, 2 rms_norm, 3 fp8_out, 4 bias,
// 5 swiglu_store, 6 store, 7 fp8_out_per_token (fused/fp8_per_token.hpp), 8 silu, 9 gelu. Arithmetic is FP32 throughout; a value is
// rounded only where a stage writes it to memory (and residual_add's result, see below), so a
// chain computes exactly what separate kernels reading and writing those arrays would.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../core/float_types.hpp"
#include "../core/ops.hpp"
#include "../fp8/packed.hpp"
#include "../gpu/group.hpp"
#include "../gpu/memory.hpp"
#include "../gpu/reduce.hpp"
#include "epilogue.hpp"
#include "stage_check.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

namespace detail {

// E consecutive elements of T at p, widened to float: one 16-byte load when E elements are 16
// bytes, element by element otherwise (a stage whose type differs from the tile's).
template <class T, int E>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void load_elems(const T* p, float (&out)[E]) {
  using traits = core::value_traits<T>;
  if constexpr (E == gpu::elems_per_vec16<T>) {
    traits::unpack(gpu::load16(p), out);
  } else {
    for (int i = 0; i < E; ++i) out[i] = traits::load(p[i]);
  }
}

// Rounds E floats to T (nearest even) and stores them; `rounded` receives the stored values.
template <class T, int E, gpu::cache_hint Stores = gpu::cache_hint::normal>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_elems(T* p, const float (&in)[E], float (&rounded)[E]) {
  using traits = core::value_traits<T>;
  if constexpr (E == gpu::elems_per_vec16<T>) {
    const gpu::vec16 v = traits::pack(in);
    if (p) gpu::store16<Stores>(p, v);
    traits::unpack(v, rounded);
  } else {
    for (int i = 0; i < E; ++i) {
      const T x = traits::store(in[i]);
      if (p) p[i] = x;
      rounded[i] = traits::load(x);
    }
  }
}

template <class T, int E, gpu::cache_hint Stores = gpu::cache_hint::normal>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_elems(T* p, const float (&in)[E]) {
  float unused[E];
  store_elems<T, E, Stores>(p, in, unused);
}

#if RCCLX_BACKEND_GPU || RCCLX_EMULATE_THREADS
template <int BlockThreads>
struct row_sum {
  using storage_type = typename gpu::block_reduce<float, BlockThreads>::storage_type;
};
#else
template <int BlockThreads>
struct row_sum {
  using storage_type = typename gpu::thread_reduce<float>::storage_type;
};
#endif

// The reduction of a row-wide stage's row_combine: rms_norm's sum of squares, fp8_out_per_token's
// maximum.
enum class row_reduction { sum, max };

// row_combine of a row-wide stage: a thread_group holds whole rows (its partial is the row's); a
// block_group combines its threads' partials with a gpu::block_reduce of BlockThreads threads in
// *tmp (the stage's storage_type, row_sum<BlockThreads>). null_tmp: the emulated threads' refusal
// of a null tmp, naming the stage.
template <row_reduction R, int BlockThreads, class Group, class Storage>
RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_combine(const Group& g, float partial, Storage* tmp, const char* null_tmp) {
  (void)g;
  (void)tmp;
  (void)null_tmp;
  if constexpr (std::is_same<Group, gpu::thread_group>::value) {
    return partial;
  } else {
#if RCCLX_BACKEND_GPU || RCCLX_EMULATE_THREADS
    static_assert(std::is_same<Group, gpu::block_group>::value,
                  "rcclx::fused: a row-wide stage's row reduction (rms_norm's row sum, fp8_out_per_token's row "
                  "maximum) runs over a whole block (gpu::block_group)");
#  if RCCLX_EMULATE_THREADS
    if (!tmp) throw error(errc::invalid_argument, null_tmp);
#  endif
    if constexpr (R == row_reduction::max) {
      return gpu::block_reduce<float, BlockThreads>().max(partial, *tmp);
    } else {
      return gpu::block_reduce<float, BlockThreads>().sum(partial, *tmp);
    }
#else
    return partial;
#endif
  }
}

}  // namespace detail

// v += residual (in FP32), then v is rounded to T: the new residual, written to `updated` (which may
// be `residual` itself: in place, as vLLM's / TRT-LLM's fused_add_rms_norm). Later stages see the
// rounded value, i.e. what a separate kernel reading the updated residual back would see.
template <class T>
struct residual_add {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::residual_add: T must be float, rcclx::bf16 or rcclx::fp16");
  static constexpr std::uint32_t stage_id = 1;
  const T* residual;  // read at residual[row * ld + col]
  T* updated;         // the new residual goes to updated[row * ld + col]; nullptr: not written
  std::size_t ld;

  // Checked mode (fused/stage_check.hpp): both arrays aligned, ld >= cols, `updated` outside the
  // symmetric bytes peers read, and either `residual` itself or clear of every row it reads.
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    const std::size_t need = detail::access_bytes<T>(ctx);
    if (stage_fault f = detail::check_output(ctx, residual, ld, ctx.cols, sizeof(T), need)) {
      if (f.what != core::misuse::stage_writes_symmetric) return f;
    }
    if (!updated) return {};
    if (stage_fault f = detail::check_output(ctx, updated, ld, ctx.cols, sizeof(T), need)) return f;
    return detail::check_rows_apart(residual, updated, ctx.rows, ctx.cols, ld, sizeof(T));
  }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E]) const {
    float r[E];
    detail::load_elems<T>(residual + p.row * ld + p.col, r);
    add_loaded(p, r, v);
  }

  // The same with the residual's E values already loaded (r: residual[row * ld + col ...], widened):
  // for kernels that load them before the reduction they follow. Same bits as operator().
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void add_loaded(const position& p, const float (&r)[E], float (&v)[E]) const {
    float s[E];
    for (int i = 0; i < E; ++i) s[i] = v[i] + r[i];
    detail::store_elems<T>(updated ? updated + p.row * ld + p.col : nullptr, s, v);
  }
};

// RMSNorm with weight: v = v * (1 / sqrt(sum(v^2) / cols + eps)) * weight[col], in FP32 (the
// factor: a correctly rounded sqrt and division, the same bits on every backend; only the order
// of the row sum depends on the group size). Row-wide: a group holds whole rows of `cols` elements.
// BlockThreads: the exact block size the kernel is launched with (the row sum is a
// gpu::block_reduce over it); ignored on the host backend, where a block is one thread (with
// RCCLX_EMULATE_THREADS=1: a block of any other size is refused, an rcclx::error naming both).
template <class T, int BlockThreads>
struct rms_norm {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::rms_norm: T must be float, rcclx::bf16 or rcclx::fp16");
  static constexpr bool row_wide = true;
  static constexpr std::uint32_t stage_id = 2;
  // Scratch of the row sum: put it in shared memory (gpu::block_shared) and pass its address.
  using storage_type = typename detail::row_sum<BlockThreads>::storage_type;

  const T* weight;  // [cols]; nullptr: no weight (plain RMS normalisation)
  float eps;
  std::size_t cols;  // row length: the mean divides by it
  storage_type* tmp;

  // Checked mode: cols is the map's (not a padded) row length, eps finite and >= 0, the weight
  // aligned.
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    if (cols == 0 || (ctx.cols != 0 && cols != ctx.cols))
      return {core::misuse::stage_cols, 0, detail::saturate_u32(cols), detail::saturate_u32(ctx.cols)};
    if (!detail::finite_at_least(eps, false)) return {core::misuse::stage_eps, 0, detail::float_bits(eps), 0};
    return check_layout(ctx);
  }
  // The weight's alignment alone.
  RCCLX_HOST_DEVICE stage_fault check_layout(const stage_context& ctx) const {
    return weight ? detail::check_pointer(weight, detail::access_bytes<T>(ctx)) : stage_fault{};
  }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_partial(const position&, const float (&v)[E]) const {
    float s = 0.0f;
    for (int i = 0; i < E; ++i) s += v[i] * v[i];
    return s;
  }

  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_combine(const Group& g, float partial) const {
    return detail::row_combine<detail::row_reduction::sum, BlockThreads>(
        g, partial, tmp, "rcclx::fused::rms_norm: tmp is null (the row sum's storage_type, in gpu::block_shared)");
  }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E], float row_total) const {
    float w[E];
    if (weight) {
      detail::load_elems<T>(weight + p.col, w);
    } else {
      for (int i = 0; i < E; ++i) w[i] = 1.0f;
    }
    apply_loaded(v, row_total, w);
  }

  // The same with the weight's E values already loaded (w: weight[col ...] widened, or 1.0f each
  // without a weight): for kernels that load them before the row sum. Same bits as operator().
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void apply_loaded(float (&v)[E], float row_total, const float (&w)[E]) const {
    const float inv_rms = 1.0f / sqrtf(row_total / static_cast<float>(cols) + eps);
    for (int i = 0; i < E; ++i) v[i] = v[i] * inv_rms * w[i];
  }
};

// FP8 output with a per-tensor scale: out = encode(v * (1 / *scale)), saturating, round to nearest
// even (rcclx::fp8 codecs: hardware conversion where the device has one, bit-identical software
// elsewhere). The scale lives in device memory so a captured graph picks up a new value (vLLM's
// static_scaled_fp8_quant). v is left unchanged. `out` is aligned to E bytes at least.
template <class Format, fp8::overflow Mode = fp8::overflow::saturate>
struct fp8_out {
  static_assert(fp8::is_format_v<Format>, "rcclx::fused::fp8_out: Format must be an rcclx::fp8 format tag");
  static constexpr std::uint32_t stage_id = 3;
  std::uint8_t* out;   // codes at out[row * ld + col]
  std::size_t ld;
  const float* scale;  // dequantize with code * *scale

  // Checked mode: out aligned to the vector's E codes, ld >= cols, the output outside the
  // symmetric bytes, *scale finite and > 0 (0, a negative, NaN or inf scale: stage_scale).
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    if (stage_fault f = check_layout(ctx)) return f;
    if (!detail::finite_at_least(*scale, true)) return {core::misuse::stage_scale, 0, detail::float_bits(*scale), 0};
    return {};
  }
  // The pointers and ld alone (no load).
  RCCLX_HOST_DEVICE stage_fault check_layout(const stage_context& ctx) const {
    if (stage_fault f = detail::check_output(ctx, out, ld, ctx.cols, 1, detail::fp8_access_bytes(ctx))) return f;
    return detail::check_pointer(scale, alignof(float));
  }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E]) const {
    store_scaled(p, v, 1.0f / *scale);
  }

  // The same with 1 / *scale already computed (a kernel that loads the scale early). Same bits.
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_scaled(const position& p, const float (&v)[E], float inv) const {
    float q[E];
    for (int i = 0; i < E; ++i) q[i] = v[i] * inv;
    fp8::encode_packed<Format, Mode>(q).store(out + p.row * ld + p.col);
  }
};

// v += bias[col] (bias widened to FP32). A row-parallel linear layer's bias, added once after the
// AllReduce (not on every rank before it).
template <class T>
struct bias {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::bias: T must be float, rcclx::bf16 or rcclx::fp16");
  static constexpr std::uint32_t stage_id = 4;
  const T* values;  // [cols]

  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    return detail::check_pointer(values, detail::access_bytes<T>(ctx));
  }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E]) const {
    float b[E];
    detail::load_elems<T>(values + p.col, b);
    for (int i = 0; i < E; ++i) v[i] += b[i];
  }
};

// The activations compute in FP32 with the device's expf / erff / tanhf: every rank gets the same
// bits (same code, same inputs), but a GPU backend and the host backend may differ in the last bit.

// v = silu(v) = v / (1 + exp(-v)).
struct silu {
  static constexpr std::uint32_t stage_id = 8;
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position&, float (&v)[E]) const {
    for (int i = 0; i < E; ++i) v[i] = v[i] / (1.0f + expf(-v[i]));
  }
};

// GELU: exact (erf, PyTorch's approximate='none') or the tanh approximation (approximate='tanh').
enum class gelu_approximation { none, tanh };

template <gelu_approximation Approx = gelu_approximation::none>
struct gelu {
  static constexpr std::uint32_t stage_id = 9;
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position&, float (&v)[E]) const {
    for (int i = 0; i < E; ++i) {
      const float x = v[i];
      if constexpr (Approx == gelu_approximation::none) {
        v[i] = 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
      } else {
        v[i] = 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
      }
    }
  }
};

// SwiGLU on interleaved gate/up columns: the row holds (gate_0, up_0, gate_1, up_1, ...); writes
// out[row * ld + j] = T(silu(gate_j) * up_j) for the vector's E / 2 pairs (j from col / 2): the
// output row is half as wide. A terminal stage (v is left unchanged). ld in output elements.
template <class T>
struct swiglu_store {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::swiglu_store: T must be float, rcclx::bf16 or rcclx::fp16");
  static constexpr std::uint32_t stage_id = 5;
  static constexpr int min_lanes = 2;  // ragged rows: element calls take gate/up pairs
  T* out;
  std::size_t ld;

  // Checked mode: out aligned, 2 * ld >= cols (the output row is half as wide), outside the
  // symmetric bytes.
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    if (ctx.cols % 2 != 0)
      return {core::misuse::stage_cols, 0, detail::saturate_u32(ctx.cols), detail::saturate_u32(ctx.cols + 1)};
    stage_fault f = detail::check_output(ctx, out, ld, ctx.cols / 2, sizeof(T), detail::access_bytes<T>(ctx, 2));
    if (f.what == core::misuse::stage_ld_short) f.b = detail::saturate_u32(ctx.cols);  // (ld, cols): 2 ld < cols
    return f;
  }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E]) const {
    static_assert(E % 2 == 0, "rcclx::fused::swiglu_store: a vector holds whole gate/up pairs");
    float y[E / 2];
    for (int j = 0; j < E / 2; ++j) {
      const float gate = v[2 * j], up = v[2 * j + 1];
      y[j] = gate / (1.0f + expf(-gate)) * up;
    }
    detail::store_elems<T, E / 2>(out + p.row * ld + p.col / 2, y);
  }
};

// out = T(v) (round to nearest even). v is left unchanged (a later stage may store it again).
// Stores: cache_hint::streaming writes full vectors evict-first (st.global.cs / nontemporal), for an
// output that should not push a concurrent phase's operands out of L2; a consumer that reads it
// right away may prefer the default.
template <class T, gpu::cache_hint Stores = gpu::cache_hint::normal>
struct store {
  static_assert(core::is_float_type_v<T>, "rcclx::fused::store: T must be float, rcclx::bf16 or rcclx::fp16");
  static constexpr std::uint32_t stage_id = 6;
  T* out;  // at out[row * ld + col]
  std::size_t ld;

  // Checked mode: out aligned, ld >= cols, outside the symmetric bytes.
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    return detail::check_output(ctx, out, ld, ctx.cols, sizeof(T), detail::access_bytes<T>(ctx));
  }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E]) const {
    detail::store_elems<T, E, Stores>(out + p.row * ld + p.col, v);
  }
};

}  // namespace fused
RCCLX_NAMESPACE_END
