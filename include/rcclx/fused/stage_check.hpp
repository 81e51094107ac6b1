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

RCCLX_NAMESPACE_BEGIN
namespace fused {

// The call as a stage sees it. rows, cols: the map's output (0, 0: a user map, shapes unchecked);
// vector_path: the stage is called with whole vectors (E = 16 / sizeof(T)); forbidden: up to two
// byte ranges [lo, hi) of this rank's symmetric buffer that peers may still read during the call
// (its region minus the call's own results area); unused ranges are {nullptr, nullptr}.
struct stage_context {
  std::size_t rows = 0, cols = 0;
  bool vector_path = true;
  const unsigned char* forbidden[2][2] = {{nullptr, nullptr}, {nullptr, nullptr}};
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

// Does [lo, hi) overlap a forbidden range of ctx?
RCCLX_HOST_DEVICE inline bool touches_forbidden(const stage_context& ctx, const void* lo, const void* hi) {
  const auto* l = static_cast<const unsigned char*>(lo);
  const auto* h = static_cast<const unsigned char*>(hi);
  for (int i = 0; i < 2; ++i)
    if (ctx.forbidden[i][0] != nullptr && l < ctx.forbidden[i][1] && ctx.forbidden[i][0] < h) return true;
  return false;
}
}  // namespace detail

}  // namespace fused
RCCLX_NAMESPACE_END
