// rcclx/fused/fp8_per_token.hpp: FP8 output with a dynamic scale per row (per-token quantization),
// torch's convention (torch._scaled_mm's rowwise scale, torchao float8 rowwise):
//   amax_i = max_j |y_ij|                      (FP32, exact; NaN ignored, as fmaxf does)
//   m_i    = qmax / max(amax_i, 1e-12f)        (FP32, correctly rounded)
//   q_ij   = encode(y_ij * m_i)                (saturating, round to nearest even: rcclx::fp8)
//   s_i    = 1.0f / m_i                        (written to scales[i]: y ~ decode(q) * s_i)
// qmax = fp8::format_traits<Format>::max_finite (448 e4m3, 240 e4m3_fnuz, 57344 e5m2 / e5m2_fnuz),
// or your own (vLLM uses 224 for e4m3_fnuz). A zero row gives m = qmax * 1e12 and codes 0.
//
//   namespace fz = rcclx::fused;
//   fz::epilogue<fz::residual_add<bf16>, fz::rms_norm<bf16, 512>, fz::fp8_out_per_token<rcclx::fp8::e4m3, 512>> epi{
//       {res, res, hidden}, {w, 1e-6f, hidden, &t0}, {codes, hidden, scales, 448.0f, &t1}};
//
// A row-wide stage (like rms_norm): a group holds whole rows; its row reduction is a maximum
// (row_identity 0, row_accumulate fmaxf, row_combine a block max). v is left unchanged.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../fp8/packed.hpp"
#include "../gpu/group.hpp"
#include "../gpu/reduce.hpp"
#include "epilogue.hpp"
#include "stage_check.hpp"
#include "stages.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// BlockThreads: the exact block size of the kernel (the row maximum is a gpu::block_reduce over
// it); ignored on the host backend. scales[row] is written by the thread holding column 0.
template <class Format, int BlockThreads, fp8::overflow Mode = fp8::overflow::saturate>
struct fp8_out_per_token {
  static_assert(fp8::is_format_v<Format>, "rcclx::fused::fp8_out_per_token: Format must be an rcclx::fp8 format tag");
  static constexpr bool row_wide = true;
  static constexpr std::uint32_t stage_id = 7;
  using storage_type = typename detail::row_sum<BlockThreads>::storage_type;

  std::uint8_t* out;  // codes at out[row * ld + col]
  std::size_t ld;
  float* scales;      // [rows]: the decoding scale of each row
  float qmax = fp8::format_traits<Format>::max_finite;
  storage_type* tmp = nullptr;  // scratch of the block maximum (gpu::block_shared)

  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_identity() const { return 0.0f; }
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_accumulate(float a, float b) const { return fmaxf(a, b); }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_partial(const position&, const float (&v)[E]) const {
    float m = 0.0f;
    for (int i = 0; i < E; ++i) m = fmaxf(m, fabsf(v[i]));
    return m;
  }

  template <class Group>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float row_combine(const Group& g, float partial) const {
    return detail::row_combine<detail::row_reduction::max, BlockThreads>(
        g, partial, tmp,
        "rcclx::fused::fp8_out_per_token: tmp is null (the row maximum's storage_type, in gpu::block_shared)");
  }

  // The row's multiplier m = qmax / max(amax, 1e-12f).
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE float multiplier(float amax) const { return qmax / fmaxf(amax, 1e-12f); }

  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void operator()(const position& p, float (&v)[E], float amax) const {
    store_scaled(p, v, multiplier(amax));
  }

  // The codes of v with the row's multiplier m (and the row's scale 1 / m from column 0).
  template <int E>
  RCCLX_HOST_DEVICE RCCLX_FORCEINLINE void store_scaled(const position& p, const float (&v)[E], float m) const {
    float q[E];
    for (int i = 0; i < E; ++i) q[i] = v[i] * m;
    fp8::encode_packed<Format, Mode>(q).store(out + p.row * ld + p.col);
    if (p.col == 0) scales[p.row] = 1.0f / m;
  }

  // Checked mode: out aligned to the vector's codes, ld >= cols, scales non-null and 4-aligned,
  // neither inside the symmetric bytes, qmax finite and > 0 (stage_scale with qmax's bits).
  RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const {
    if (stage_fault f = check_layout(ctx)) return f;
    if (!detail::finite_at_least(qmax, true)) return {core::misuse::stage_scale, 0, detail::float_bits(qmax), 0};
    return {};
  }
  RCCLX_HOST_DEVICE stage_fault check_layout(const stage_context& ctx) const {
    if (stage_fault f = detail::check_output(ctx, out, ld, ctx.cols, 1, detail::fp8_access_bytes(ctx))) return f;
    stage_context one = ctx;  // scales: one float per row
    one.cols = 0;
    return detail::check_output(one, scales, 1, 0, sizeof(float), alignof(float));
  }
};

}  // namespace fused
RCCLX_NAMESPACE_END
