// rcclx/fused/stage_check.hpp: what the checked mode (RCCLX_CHECKS) asks of an epilogue stage before
// any output is written: the stage's own arguments (pointer alignment, leading dimension, scale,
// epsilon, columns) against the call's map and the symmetric bytes the call must not write.
//
// A stage may declare
//   RCCLX_HOST_DEVICE stage_fault check(const stage_context& ctx) const;   // {} when fine
//   static constexpr std::uint32_t stage_id = ...;                         // 1.. library stages, 0 user
// and fused::epilogue<...>::check(ctx) returns the first stage's fault with `stage` = its index.
// Stages without check() are taken as fine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "../config.hpp"
#include "../core/error.hpp"
#include "../gpu/memory.hpp"

RCCLX_NAMESPACE_BEGIN
namespace fused {

// The call as a stage sees it. rows, cols: the map's output (0, 0: a user map, shapes unchecked);
// vector_path: the stage is called with whole vectors (E = 16 / sizeof(T)); forbidden: up to two
// byte ranges [lo, hi) of this rank's symmetric buffer that peers may still read during the call
// (its region minus the call's own results area); unused ranges are {nullptr, nullptr}.
// vec_elems: E of the vector path (16 / sizeof the tile's element type), 0 when unknown: a stage
// whose element type differs from the tile's then takes its vectors as 16-byte accesses too.
struct stage_context {
  std::size_t rows = 0, cols = 0;
  bool vector_path = true;
  const unsigned char* forbidden[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
  int vec_elems = 0;
};

// A stage's verdict: what = the misuse (core/error.hpp), (a, b) its two values, stage = the stage's
// index in its epilogue (set by epilogue::check) | stage_id << 8.
struct stage_fault {
  core::misuse what{};
  std::uint32_t stage = 0, a = 0, b = 0;
  RCCLX_HOST_DEVICE constexpr explicit operator bool() const { return static_cast<std::uint32_t>(what) != 0; }
};

namespace detail {
template <class Stage, class = void>
struct has_stage_check : std::false_type {};
template <class Stage>
struct has_stage_check<Stage, std::void_t<decltype(std::declval<const Stage&>().check(std::declval<const stage_context&>()))>>
    : std::true_type {};

// The verdict of a whole epilogue as the collectives ask for it before any output: epi.check(ctx)
// (fused::epilogue, rmsnorm_epilogue: the first bad stage, stage = index | stage_id << 8) where
// the epilogue has one, else {} (a plain callable).
template <class Epilogue>
RCCLX_HOST_DEVICE stage_fault epilogue_fault(const Epilogue& epi, const stage_context& ctx) {
  if constexpr (has_stage_check<Epilogue>::value) {
    return epi.check(ctx);
  } else {
    (void)epi, (void)ctx;
    return {};
  }
}

// Does [lo, hi) overlap a forbidden range of ctx?
RCCLX_HOST_DEVICE inline bool touches_forbidden(const stage_context& ctx, const void* lo, const void* hi) {
  const auto* l = static_cast<const unsigned char*>(lo);
  const auto* h = static_cast<const unsigned char*>(hi);
  for (int i = 0; i < 2; ++i)
    if (ctx.forbidden[i][0] != nullptr && l < ctx.forbidden[i][1] && ctx.forbidden[i][0] < h) return true;
  return false;
}

RCCLX_HOST_DEVICE constexpr std::uint32_t saturate_u32(std::size_t x) {
  return x > 0xFFFFFFFFu ? 0xFFFFFFFFu : static_cast<std::uint32_t>(x);
}

// Is p aligned to `need` bytes (a power of two)? null counts as misaligned (a = 0).
RCCLX_HOST_DEVICE inline stage_fault check_pointer(const void* p, std::size_t need) {
  const auto bits = reinterpret_cast<std::uintptr_t>(p);
  if (p == nullptr || (bits & (need - 1)) != 0)
    return {core::misuse::stage_misaligned, 0, static_cast<std::uint32_t>(bits & 0xFFu), static_cast<std::uint32_t>(need)};
  return {};
}

// The access width a stage of element type T gets on ctx's path: 16 bytes when its E elements are
// one 16-byte vector, else one element.
template <class T>
RCCLX_HOST_DEVICE constexpr std::size_t access_bytes(const stage_context& ctx, int elems_per_call_ratio = 1) {
  return ctx.vector_path && (ctx.vec_elems == 0 || ctx.vec_elems / elems_per_call_ratio == static_cast<int>(16 / sizeof(T)))
             ? 16u
             : sizeof(T);
}

// The access width of E FP8 codes on ctx's path (fp8::packed<E>: min(E, 16) bytes).
RCCLX_HOST_DEVICE constexpr std::size_t fp8_access_bytes(const stage_context& ctx) {
  return !ctx.vector_path ? 1u : ctx.vec_elems == 0 ? 16u : static_cast<std::size_t>(ctx.vec_elems < 16 ? ctx.vec_elems : 16);
}

// An output of element size `elem` at `out` with leading dimension `ld` (in elements) whose rows
// are `row_elems` wide (ctx.cols, or what the stage writes per row): alignment (pointer and row
// stride), ld against the row, and the bytes [out, out + rows * ld) against ctx.forbidden.
// a of stage_writes_symmetric: the first overlapping byte's offset from forbidden[0][0] (the
// caller may rebase it and sets b, the rank).
RCCLX_HOST_DEVICE inline stage_fault check_output(const stage_context& ctx, const void* out, std::size_t ld,
                                                  std::size_t row_elems, std::size_t elem, std::size_t need) {
  if (stage_fault f = check_pointer(out, need)) return f;
  if ((ld * elem) % need != 0)
    return {core::misuse::stage_misaligned, 0, static_cast<std::uint32_t>((ld * elem) % need), static_cast<std::uint32_t>(need)};
  if (row_elems != 0 && ld < row_elems)
    return {core::misuse::stage_ld_short, 0, saturate_u32(ld), saturate_u32(row_elems)};
  const std::size_t rows = ctx.rows != 0 ? ctx.rows : 1;
  const auto* lo = static_cast<const unsigned char*>(out);
  const auto* hi = lo + rows * ld * elem;
  for (int i = 0; i < 2; ++i) {
    if (ctx.forbidden[i][0] != nullptr && lo < ctx.forbidden[i][1] && ctx.forbidden[i][0] < hi) {
      const auto* first = lo > ctx.forbidden[i][0] ? lo : ctx.forbidden[i][0];
      const auto* base = ctx.forbidden[0][0] != nullptr && ctx.forbidden[0][0] < first ? ctx.forbidden[0][0] : first;
      return {core::misuse::stage_writes_symmetric, 0, saturate_u32(static_cast<std::size_t>(first - base)), 0};
    }
  }
  return {};
}

// A stage that reads rows of `cols` elements of `elem` bytes at `in` and writes them at `out` (the
// same ld, `rows` rows): out is in itself (in place: each element read before its own store) or
// writes no element any row reads; otherwise a block's stores overwrite rows other blocks have
// still to read (stage_aliases: the byte distance, the bytes of the rows read). Unknown shape
// (rows or cols 0): {}.
RCCLX_HOST_DEVICE inline stage_fault check_rows_apart(const void* in, const void* out, std::size_t rows,
                                                      std::size_t cols, std::size_t ld, std::size_t elem) {
  if (in == out || rows == 0 || cols == 0 || ld < cols) return {};
  const auto a = reinterpret_cast<std::uintptr_t>(in), b = reinterpret_cast<std::uintptr_t>(out);
  const std::size_t dist = a > b ? a - b : b - a, row = ld * elem, span = cols * elem;
  // out's row r and in's row r + k overlap iff |dist - k * row| < span for some k in [0, rows - 1]
  // (taking the lower pointer's rows as the ones displaced): the two k nearest dist / row.
  const std::size_t k = dist / row;
  const bool near_k = k < rows && dist - k * row < span;
  const bool near_k1 = k + 1 < rows && (k + 1) * row - dist < span;
  if (near_k || near_k1) return {core::misuse::stage_aliases, 0, saturate_u32(dist), saturate_u32(rows * row)};
  return {};
}

// A float that must be finite and > 0 (positive) or >= 0 (non-negative): false when not.
RCCLX_HOST_DEVICE inline bool finite_at_least(float x, bool positive) {
  return x == x && x - x == 0.0f && (positive ? x > 0.0f : x >= 0.0f);
}
RCCLX_HOST_DEVICE inline std::uint32_t float_bits(float x) { return gpu::bit_cast<std::uint32_t>(x); }
}  // namespace detail

}  // namespace fused
RCCLX_NAMESPACE_END
